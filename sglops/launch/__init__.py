"""Server profiles -> launch scripts checked per release -> restart/stop/status on a host."""

"""The layer every task stands on: inventory, the remote layer and its transports, errors, values, console."""

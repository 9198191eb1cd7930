# GPU telemetry during a run, on the host: one sampler (NVML where the host's python has it, else one
# `nvidia-smi --query-gpu=... -lms N` process), started before the run and stopped with it. Each sample is
# [unix time, gpu index, SM clock MHz, memory clock MHz, utilisation %, power W, memory used MiB]; the laptop
# summarises them per level (sglops/bench/telemetry.py). No GPU is reported as absent, never as zeros; a
# stand-in nvidia-smi (sglops' sandbox) is labelled so (facts.nvidia_smi reads what it says of itself).
# Standard library only.
import importlib
import os
import shutil
import subprocess
import threading
import time

from .facts import nvidia_smi

FIELDS = ("index", "clocks.sm", "clocks.mem", "utilization.gpu", "power.draw", "memory.used")
# rows kept (8 GPUs at 2 per second: 3.5 hours); later ones are counted, not kept
MAX_SAMPLES = 200_000


def _number(text):
    text = text.strip()
    try:
        return float(text)
    # "[N/A]", "[Not Supported]": the GPU does not report it
    except ValueError:
        return None


class Sampler:
    """start() -> the sampler running; stop() -> what it saw and what it cost (its CPU seconds per second)."""

    def __init__(self, interval_ms):
        self.interval_ms = int(interval_ms)
        self.samples, self.dropped, self.errors = [], 0, []
        self.proc = self.thread = self.nvml = None
        self.source, self.absent, self.standin = None, None, False
        self.cpu_thread = 0.0
        self._stop = threading.Event()

    def start(self):
        self.t0, self.wall0 = time.perf_counter(), time.time()
        if self.interval_ms <= 0:
            self.absent = "not asked (--telemetry-interval 0)"
            return self
        try:
            # NVML's python binding, where the host's python has it
            pynvml = importlib.import_module("pynvml")
            pynvml.nvmlInit()
            self.nvml, self.source = pynvml, "nvml"
            self.thread = threading.Thread(target=self._poll_nvml, daemon=True)
        except Exception:  # noqa: BLE001 (no binding, no driver, no GPU: nvidia-smi is asked instead)
            smi = shutil.which("nvidia-smi")
            if not smi:
                self.absent = "no GPU telemetry: no NVML binding and no nvidia-smi on the host's PATH"
                return self
            self.standin = bool((nvidia_smi() or {}).get("standin"))
            self.source = "nvidia-smi (sglops stand-in: no GPU)" if self.standin else "nvidia-smi"
            self.proc = subprocess.Popen(
                [
                    smi,
                    "--query-gpu=" + ",".join(FIELDS),
                    "--format=csv,noheader,nounits",
                    "-lms",
                    str(self.interval_ms),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self.thread = threading.Thread(target=self._read_smi, daemon=True)
        self.thread.start()
        return self

    def _keep(self, row):
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(row)
        else:
            self.dropped += 1

    def _read_smi(self):
        c0 = time.thread_time()
        for line in self.proc.stdout:
            parts = line.split(",")
            if len(parts) != len(FIELDS):
                if line.strip() and len(self.errors) < 3:
                    self.errors.append(line.strip()[:200])
                continue
            values = [_number(p) for p in parts]
            if values[0] is not None:
                self._keep([round(time.time(), 3), int(values[0]), *values[1:]])
        self.cpu_thread = time.thread_time() - c0

    def _poll_nvml(self):
        c0 = time.thread_time()
        nv = self.nvml
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        while not self._stop.is_set():
            now = round(time.time(), 3)
            for i, h in enumerate(handles):
                try:
                    util = nv.nvmlDeviceGetUtilizationRates(h).gpu
                    self._keep(
                        [
                            now,
                            i,
                            nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                            nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                            util,
                            nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                            nv.nvmlDeviceGetMemoryInfo(h).used / (1 << 20),
                        ]
                    )
                except Exception as exc:  # noqa: BLE001 (a GPU that stops answering: said, not invented)
                    if len(self.errors) < 3:
                        self.errors.append(f"gpu {i}: {exc}"[:200])
            self._stop.wait(self.interval_ms / 1000.0)
        self.cpu_thread = time.thread_time() - c0

    def stop(self):
        """Stop the sampler (its process waited for: no orphan) and say what it saw and cost."""
        wall = time.perf_counter() - self.t0
        child_cpu = 0.0
        self._stop.set()
        if self.proc is not None:
            self.proc.terminate()
            try:
                _, status, usage = os.wait4(self.proc.pid, 0)
                self.proc.returncode = (
                    os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
                )
                child_cpu = usage.ru_utime + usage.ru_stime
            except ChildProcessError:
                pass
            err = self.proc.stderr.read() if self.proc.stderr else ""
            if err.strip() and len(self.errors) < 3:
                self.errors.append(err.strip().splitlines()[-1][:200])
        if self.thread is not None:
            self.thread.join(5)
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
        cpu = child_cpu + self.cpu_thread
        return {
            "source": self.source,
            "absent": self.absent,
            "standin": self.standin,
            "interval_ms": self.interval_ms,
            "fields": ["t", *FIELDS],
            "samples": self.samples,
            "dropped": self.dropped,
            "errors": self.errors,
            "sampler": {
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 4),
                "process_cpu_s": round(child_cpu, 4),
                "reader_cpu_s": round(self.cpu_thread, 4),
                "cpu_s_per_s": round(cpu / wall, 5) if wall > 0 else None,
            },
        }


def main(args):
    """Sample for `seconds` at `interval_ms` and return what
    the sampler saw and cost (its overhead, measured)."""
    sampler = Sampler(args["interval_ms"]).start()
    time.sleep(float(args["seconds"]))
    return sampler.stop()

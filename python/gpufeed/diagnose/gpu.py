"""GPU utilisation for ``gpufeed diagnose``'s loader run: NVML through
ctypes (no Python package needed), else nvidia-smi, else none with the
reason."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from typing import List, Optional

__all__ = ["GpuSampler"]


class GpuSampler:
    """GPU utilisation samples from NVML (libnvidia-ml via ctypes), else
    nvidia-smi, else none with the reason."""

    def __init__(self):
        self.source = None
        self.reason = None
        self._nvml = None
        self._handles = []
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if nvml.nvmlInit_v2() == 0:
                count = ctypes.c_uint(0)
                nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
                for index in range(count.value):
                    handle = ctypes.c_void_p()
                    if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
                        self._handles.append(handle)
                if self._handles:
                    self._nvml = nvml
                    self.source = "NVML"
        except (OSError, AttributeError):
            pass
        if self.source is None:
            self._smi = shutil.which("nvidia-smi")
            if self._smi:
                self.source = "nvidia-smi"
            else:
                self.reason = ("no GPU utilisation: neither libnvidia-ml.so.1 (NVML) nor "
                               "nvidia-smi is present on this machine")

    def sample(self) -> Optional[List[float]]:
        if self.source == "NVML":
            class Utilization(ctypes.Structure):
                _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]
            values = []
            for handle in self._handles:
                rates = Utilization()
                if self._nvml.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) == 0:
                    values.append(float(rates.gpu))
            return values
        if self.source == "nvidia-smi":
            try:
                output = subprocess.run(
                    [self._smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True, text=True, timeout=5).stdout
                return [float(v) for v in output.split() if v.replace(".", "").isdigit()]
            except (OSError, subprocess.TimeoutExpired, ValueError):
                return None
        return None

    def close(self):
        if self._nvml is not None:
            self._nvml.nvmlShutdown()

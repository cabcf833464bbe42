"""Runs a Python program under PyTorch's own ``MemTracker`` and writes the peak it saw.

    python python/memtracker_run.py OUT.json PROGRAM [ARGS...]

``torch.distributed._tools.mem_tracker.MemTracker`` counts the bytes of every tensor storage
alive, per device, from the ops it sees (no allocator: no rounding to blocks, no segments, no
library workspaces). ``python/predict_check.py --memtracker`` runs this under ``memscape
predict`` so that the program's CUDA tensors exist (as fake CPU tensors), and puts MemTracker's
peak beside memscape's prediction and the GPU recording: the anchor the prediction is measured
against. OUT.json: ``{device: {category: bytes, "Total": bytes}}`` at MemTracker's peak.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import Any


def main() -> None:
    out, program, *rest = sys.argv[1:]
    from torch.distributed._tools.mem_tracker import MemTracker

    class EveryIteration(MemTracker):  # type: ignore[misc]
        """MemTracker refuses a second forward of a root module ("multiple iterative calls")
        and says to call ``reset_mod_stats`` between iterations: done here, since the program
        runs as it is. Only the per-module statistics are reset; the peak is the whole run's."""

        def _pre_fw_hook(self, module: Any, inputs: Any) -> None:
            name = self._mod_tracker.get_known_fqn(module)
            if (module in self.memory_tracking and not self._mod_tracker.is_bw
                    and set(self._mod_tracker.parents) - {name} == {"Global"}):
                self.reset_mod_stats()
            super()._pre_fw_hook(module, inputs)

    sys.argv = [program, *rest]
    sys.path[0] = os.path.dirname(os.path.abspath(program))
    tracker = EveryIteration()
    try:
        with tracker:
            runpy.run_path(program, run_name="__main__")
    finally:
        peak = tracker.get_tracker_snapshot("peak")
        with open(out, "w") as f:
            json.dump({str(dev): {str(k): v for k, v in snap.items()} for dev, snap in peak.items()}, f)


if __name__ == "__main__":
    main()

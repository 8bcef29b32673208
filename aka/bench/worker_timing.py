"""Inside a candidate worker on a GPU: baselines, fingerprints and the timed samples.

Owns the worker side of ARCHITECTURE.md §4 stage 5: baselines (eager, torch.compile) are built,
warmed and fingerprinted *before* the candidate is imported and checked again afterwards; every
sample is one call between events on the launching stream after an L2 flush, plus a device-wide
window; input sets rotate at distinct addresses. Baselines run on inputs of their own seed, so
memory they free never holds a correct answer for the candidate's inputs. Returns raw samples
only; statistics and verdicts are the parent's.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path
from typing import Any

from aka.bench.guards import fingerprint
from aka.bench.problem_runtime import ProblemRuntime, flatten_outputs

__all__ = ["TimingSession"]

_BASELINE_SEED = 1_000_003
#: The baselines a timing session can build, in the order they are timed.
BASELINES = ("eager", "torch_compile", "library")
#: CUlimit CU_LIMIT_PERSISTING_L2_CACHE_SIZE (cuda.h).
_CU_LIMIT_PERSISTING_L2 = 0x06


def _reset_persisting_l2() -> dict[str, int]:
    """Return L2 lines marked persisting to normal and set the persisting carve-out to 0.

    Through the driver API (``cuCtxResetPersistingL2Cache``, ``cuCtxSetLimit``) on the current
    (primary) context, so no access-policy window set by earlier code keeps data resident in L2
    across the flush. Returns each call's CUresult (0 = success; -1 = the driver was not found).
    """
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        limit = driver.cuCtxSetLimit(ctypes.c_int(_CU_LIMIT_PERSISTING_L2), ctypes.c_size_t(0))
        return {"reset": int(driver.cuCtxResetPersistingL2Cache()), "limit": int(limit)}
    except (OSError, AttributeError):
        return {"reset": -1, "limit": -1}


def _read_clocks() -> dict[str, Any]:
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    parts = [p.strip() for p in out.stdout.strip().split(",")]
    keys = ("sm_mhz", "mem_mhz", "temp_c", "power_w")
    return dict(zip(keys, parts, strict=False)) if len(parts) == len(keys) else {}


class TimingSession:
    """Baselines and timing for one candidate worker."""

    def __init__(self, rt: ProblemRuntime, task: dict[str, Any], ev: Any) -> None:
        import torch

        from aka.hardware import empty_kernel_fn, make_l2_flusher

        self.rt, self.task, self.ev = rt, task, ev
        self.cfg: dict[str, Any] = task["timing"]
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        flush_l2 = make_l2_flusher(
            int(props.L2_cache_size),
            self.cfg["l2_flush_factor"],
            mode=self.cfg.get("l2_flush_mode", "read"),
        )
        # After the flush, a busy-wait keeps the GPU occupied while the host launches the call, so
        # the window starts on a busy device and times the device's work, not Python's.
        lead_cycles = int(
            self.cfg.get("host_lead_us", 0.0) * getattr(props, "clock_rate", 1_500_000) / 1e3
        )

        def flush() -> None:
            flush_l2()
            if lead_cycles > 0:
                torch.cuda._sleep(lead_cycles)

        self.flush = flush
        self.empty = empty_kernel_fn()
        self.baselines: dict[str, dict[str, Any]] = {}
        self.baseline_errors: dict[str, str] = {}
        self.fingerprints: dict[str, str] = {}
        self.launch_floor: dict[str, list[float]] = {}
        self.empty_unflushed: dict[str, list[float]] = {}
        self.clocks_before: dict[str, Any] = _read_clocks()
        self.l2_reset: list[dict[str, int]] = []

    def _sample(self, fn: Any, *, flush: bool = True) -> dict[str, list[float]]:
        from aka.hardware import sample_windows

        got = sample_windows(
            fn,
            n_samples=self.cfg["max_samples"],
            flush=self.flush if flush else None,
            warmup_s=self.cfg["warmup_ms"] / 1000.0,
            budget_s=self.cfg["sample_budget_s"],
            min_samples=self.cfg["min_samples"],
        )
        return {
            "stream_us": list(got.stream_us),
            "device_us": list(got.device_us),
            "host_us": list(got.host_us),
        }

    def _sample_paired(self, call: Any) -> dict[str, list[float]]:
        """Time ``call`` with the empty kernel interleaved: call, empty, call, empty...

        The device-wide window's gap over the stream window is mostly the host's wake-up from
        ``torch.cuda.synchronize()``, and that drifts by several microseconds over a worker's life
        on a shared machine. The empty kernel's gap measured between the candidate's own samples
        is the baseline its gap is judged against (``aka.bench.timing``), so drift cancels.
        Returns the candidate's windows plus ``empty_stream_us``/``empty_device_us``.
        """
        from aka.hardware import sample_windows

        def both(i: int) -> None:
            if i % 2:
                self.empty(i // 2)
            else:
                call(i // 2)

        got = sample_windows(
            both,
            n_samples=2 * self.cfg["max_samples"],
            flush=self.flush,
            warmup_s=self.cfg["warmup_ms"] / 1000.0,
            budget_s=2 * self.cfg["sample_budget_s"],
            min_samples=2 * self.cfg["min_samples"],
        )
        return {
            "stream_us": list(got.stream_us[0::2]),
            "device_us": list(got.device_us[0::2]),
            "host_us": list(got.host_us[0::2]),
            "empty_stream_us": list(got.stream_us[1::2]),
            "empty_device_us": list(got.device_us[1::2]),
        }

    def _input_sets(
        self, shape: dict[str, Any], seeds: list[int]
    ) -> list[tuple[list[Any], dict[str, Any]]]:
        return [
            self.rt.make_inputs(shape, seeds[k % len(seeds)])
            for k in range(self.cfg["rotating_sets"])
        ]

    def build_baselines(self) -> None:
        """Build and warm the baselines, time the launch floor, record fingerprints."""
        import torch

        self.ev.emit("baselines")
        for shape in self.task["shapes"]:
            eager = self.rt.build_model(self.rt.reference.Model, shape, self.task["seeds"][0])
            sets = self._input_sets(
                shape, [_BASELINE_SEED + k for k in range(self.cfg["rotating_sets"])]
            )
            entry: dict[str, Any] = {"sets": sets, "eager": eager}
            if (
                "torch_compile" in self.cfg["baselines"]
                and shape["id"] not in self.cfg["skip_compile"]
            ):
                try:
                    compiled = torch.compile(eager)
                    with torch.no_grad():
                        compiled(*sets[0][0], **sets[0][1])
                    entry["torch_compile"] = compiled
                except Exception as err:  # noqa: BLE001 - a baseline failing is recorded, not fatal
                    self.baseline_errors[f"{shape['id']}/torch_compile"] = (
                        f"{type(err).__name__}: {err}"
                    )
            if "library" in self.cfg["baselines"] and self.rt.library is not None:
                self._build_library(shape, eager, sets, entry)
            self.baselines[shape["id"]] = entry
        torch.cuda.synchronize()
        self.launch_floor = self._sample(lambda i: self.empty(i))
        # The same empty call without the flush in front: the host, not the GPU, is then the slow
        # side, as for launch-bound candidates, and its sync wake-up gap is larger.
        self.empty_unflushed = self._sample(lambda i: self.empty(i), flush=False)
        self.fingerprints = self._fingerprint()

    def _build_library(
        self, shape: dict[str, Any], eager: Any, sets: list[Any], entry: dict[str, Any]
    ) -> None:
        """Build the library baseline with the reference's weights and run it once."""
        import torch

        from aka.bench.worker import _load_weights

        try:
            assert self.rt.library is not None
            library = self.rt.build_model(self.rt.library.Model, shape, self.task["seeds"][0])
            _load_weights(library, eager)
            with torch.no_grad():
                library(*sets[0][0], **sets[0][1])
            entry["library"] = library
        except Exception as err:  # noqa: BLE001 - a baseline failing is recorded, not fatal
            self.baseline_errors[f"{shape['id']}/library"] = f"{type(err).__name__}: {err}"

    def _fingerprint(self) -> dict[str, str]:
        # The timers, the harness's entry points and the reference's forward are the candidate
        # guard's watch (aka.bench.guards, installed after this and before the import); this
        # session watches what only it holds: the baseline models it built.
        watched: dict[str, Any] = {}
        for sid, entry in self.baselines.items():
            for name in BASELINES:
                if name in entry:
                    watched[f"{sid}/{name}"] = entry[name]
                    watched[f"{sid}/{name}.forward"] = getattr(entry[name], "forward", None)
        return {k: fingerprint(v) for k, v in watched.items()}

    def check_fingerprints(self, when: str) -> None:
        """Raise ``tampered`` if a baseline model (or its forward) was replaced."""
        from aka.bench.worker import WorkerFailure

        now = self._fingerprint()
        changed = sorted(k for k in self.fingerprints if now.get(k) != self.fingerprints[k])
        if changed:
            raise WorkerFailure("tampered", f"{when}: changed {', '.join(changed)}", "timing")

    def time_if_asked(self, cls: type, workdir: Path, go: dict[str, Any]) -> dict[str, Any] | None:
        """Time the candidate and baselines per shape if the parent said so."""
        import torch

        from aka.bench.worker import _load_weights, _save

        if not go.get("time"):
            return None
        rows = []
        seeds = self.task["seeds"]
        for i, shape in enumerate(self.task["shapes"]):
            if shape["id"] not in go.get("shapes", [shape["id"]]):
                continue
            self.ev.emit("timing", shape_id=shape["id"], done=i, total=len(self.task["shapes"]))
            model = self.rt.build_model(cls, shape, seeds[0])
            _load_weights(model, self.rt.build_model(self.rt.reference.Model, shape, seeds[0]))
            sets = self._input_sets(shape, seeds)
            last: dict[int, Any] = {}

            def call(j: int, m: Any = model, s: Any = sets, keep: dict[int, Any] = last) -> None:
                k = j % len(s)
                keep[k] = m(*s[k][0], **s[k][1])

            with torch.no_grad():
                self.l2_reset.append(_reset_persisting_l2())
                cand = self._sample_paired(call)
                base = {
                    name: self._sample(self._baseline_call(shape["id"], name))
                    for name in BASELINES
                    if name in self.baselines[shape["id"]]
                }
            files = {}
            for k, out in last.items():
                structure, tensors = flatten_outputs(out)
                path = workdir / f"timed_{i}_{k}.pt"
                _save(path, structure, tensors, {})
                files[str(k)] = {"file": path.name, "seed": seeds[k % len(seeds)]}
            rows.append(
                {
                    "shape_id": shape["id"],
                    "candidate": cand,
                    "baselines": base,
                    "timed_files": files,
                }
            )
        self.check_fingerprints("after timing")
        return self._report(rows)

    def _report(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """What the parent gets: the timed rows, the launch floor, clocks and the L2 resets."""
        return {
            "launch_floor": self.launch_floor,
            "empty_unflushed": self.empty_unflushed,
            "shapes": rows,
            "baseline_errors": self.baseline_errors,
            "clocks_before": self.clocks_before,
            "clocks_after": _read_clocks(),
            "persisting_l2_reset": bool(self.l2_reset)
            and all(r["reset"] == 0 for r in self.l2_reset),
            "persisting_l2_calls": self.l2_reset[:1],
        }

    def time_baselines(self) -> dict[str, Any]:
        """Time every built baseline per shape (a run with no candidate: ``aka bench run``)."""
        import torch

        rows = []
        for i, shape in enumerate(self.task["shapes"]):
            self.ev.emit("timing", shape_id=shape["id"], done=i, total=len(self.task["shapes"]))
            with torch.no_grad():
                self.l2_reset.append(_reset_persisting_l2())
                base = {
                    name: self._sample(self._baseline_call(shape["id"], name))
                    for name in BASELINES
                    if name in self.baselines[shape["id"]]
                }
            rows.append({"shape_id": shape["id"], "baselines": base})
        self.check_fingerprints("after timing")
        return self._report(rows)

    def _baseline_call(self, shape_id: str, name: str) -> Any:
        entry = self.baselines[shape_id]
        fn, sets = entry[name], entry["sets"]

        def call(j: int) -> None:
            k = j % len(sets)
            fn(*sets[k][0], **sets[k][1])

        return call

"""Multi-GPU (issue #9): a round scored on every GPU at once, jobs on their own GPUs, no interference.

Three parts, each printed as a table, with its raw numbers in ``multi_gpu_<date>.json``:

(a) ``aka optimize`` (the offline SearchProposer, no LLM, no knowledge base) on the rms_norm example,
    8 candidates per round, once with ``--workers 1`` and once with ``--workers 2``: the wall-time
    ratio of the two runs (target >= 1.7x), the ratio of their evaluate nodes alone, the GPU that
    scored each candidate, and whether both runs reached the same verdicts. A warm-up
    ``aka bench score`` first fills the ceilings and torch.compile-baseline caches both runs share.
(b) ``aka serve`` with ``workers=auto`` (one job slot per GPU): two jobs POSTed at once; each job's
    worker name (``host:pid:slotN:gpuX``), the GPUs its candidates were scored on (its run.json),
    and the overlap of the two jobs' running intervals.
(c) Timing interference: one candidate timed on GPU 0 alone, then while GPU 1 evaluates another
    candidate in a loop, alternating, twice each; the medians per shape and their ratio (target
    within 2%).

The problem is the rms_norm example with the tune shapes of ``--shapes`` (default two) and no
holdout shapes, so a run is mostly its evaluations (both worker counts run the same problem).
Every process started gets ``NCCL_NVLS_ENABLE=0`` and ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``.
With one GPU visible, (a) and (b) are skipped (the output says why) and (c) times its alone part
only, so the script can be smoke-checked on a one-GPU machine; ``--device cpu`` runs (a) and (b)
in the CPU interpreter with two interpreter slots, to check the plumbing on a machine without GPUs
(nothing is timed there, so its ratios mean nothing). Logs, run directories and the service's data
go to a temp directory (printed); only the JSON goes to ``--out``.

Run on a two-GPU machine from the repository root (one call must fit 10 minutes, so split parts
over calls), then merge the two JSON files:

    PYTHONPATH=$PWD python3 benchmarks/multi_gpu.py --parts a --out $OUT
    PYTHONPATH=$PWD python3 benchmarks/multi_gpu.py --parts b,c --out $OUT
    python3 benchmarks/multi_gpu.py --merge A.json B.json   # -> benchmarks/results/multi_gpu_<date>.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from service_gpu import follow, free_port, make_token, wait_healthy  # noqa: E402 - after the path

RMS_NORM = REPO / "configs" / "examples" / "rms_norm"
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
RATIO_TARGET = 1.7
INTERFERENCE_TARGET = 0.02
os.environ.update(MULTICAST_OFF)  # this process's own scorers (part c) and everything it starts


# ---------------------------------------------------------------- shared helpers
def _header(device: str) -> dict[str, Any]:
    from aka.hardware import detect_device, library_versions, visible_gpus

    gpus = visible_gpus() if device == "cuda" else []
    infos = [detect_device(i) for i in range(len(gpus))]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": os.uname().nodename,
        "cpu_count": os.cpu_count(),
        "mode": device,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "visible_gpus": gpus,
        "devices": [i.model_dump(mode="json") if i else None for i in infos],
        "versions": library_versions(),
    }


def _problem(work: Path, shapes: str) -> Path:
    """The rms_norm example with the chosen tune shapes (plus its smoke shapes), no holdout."""
    import yaml

    target = work / "rms_norm"
    shutil.copytree(RMS_NORM, target, dirs_exist_ok=True)
    op_yaml = target / "op.yaml"
    spec = yaml.safe_load(op_yaml.read_text())
    cases = spec["shapes"]["cases"]
    keep = [s.strip() for s in shapes.split(",") if s.strip()]
    if keep != ["all"]:
        unknown = sorted(set(keep) - {c["id"] for c in cases})
        if unknown:
            raise SystemExit(
                f"--shapes {unknown} are not rms_norm shapes: {[c['id'] for c in cases]}"
            )
    spec["shapes"] = {
        "cases": [
            c
            for c in cases
            if c.get("split") == "smoke"
            or (c.get("split", "tune") == "tune" and (keep == ["all"] or c["id"] in keep))
        ]
    }
    op_yaml.write_text(yaml.safe_dump(spec, sort_keys=False))
    return op_yaml


def _env(work: Path, **extra: str) -> dict[str, str]:
    return (
        os.environ
        | MULTICAST_OFF
        | {
            "AKA_PATHS__CACHE_DIR": str(work / "cache"),  # shared by every part: warm after (a)
            "AKA_PATHS__RUNS_DIR": str(work / "runs"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        | extra
    )


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class GpuSampler:
    """``nvidia-smi`` once a second in a thread: per GPU, memory used and utilisation."""

    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        query = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
                 "--format=csv,noheader,nounits"]  # fmt: skip
        while not self._stop.is_set():
            try:
                out = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout
            except (OSError, subprocess.SubprocessError):
                return
            t = round(time.monotonic() - self._t0, 1)
            for line in out.strip().splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 3 and parts[0].isdigit():
                    self.samples.append({"t_s": t, "gpu": int(parts[0]),
                                         "util": _num(parts[1]), "mem_mib": _num(parts[2])})  # fmt: skip
            self._stop.wait(1.0)

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per physical GPU: samples, share with utilisation > 0, peak memory (MiB)."""
        out: dict[str, dict[str, Any]] = {}
        for gpu in sorted({s["gpu"] for s in self.samples}):
            rows = [s for s in self.samples if s["gpu"] == gpu]
            busy = [s for s in rows if (s["util"] or 0) > 0]
            out[str(gpu)] = {
                "samples": len(rows),
                "busy_share": round(len(busy) / len(rows), 3) if rows else None,
                "peak_mem_mib": max((s["mem_mib"] or 0) for s in rows),
            }
        return out


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# ---------------------------------------------------------------- (a) aka optimize
def _optimize(problem: Path, workers: int, args: argparse.Namespace, work: Path, tag: str) -> dict:
    out = work / "runs" / tag
    log = work / f"{tag}.log"
    cmd = [sys.executable, "-m", "aka", "optimize", str(problem), "--workers", str(workers),
           "--candidates", str(args.candidates), "--max-iters", str(args.max_iters),
           "--seed", "0", "--no-kb", "--device", args.device, "--out", str(out)]  # fmt: skip
    env = _env(work, AKA_AGENT__NCU="true" if args.ncu else "false")
    print(f"[a] {tag}: aka optimize --workers {workers} ...", flush=True)
    with GpuSampler() as sampler, log.open("wb") as fh:
        start = time.monotonic()
        done = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
        wall = time.monotonic() - start
    row: dict[str, Any] = {"tag": tag, "workers_asked": workers, "exit_code": done.returncode,
                           "wall_s": round(wall, 2), "gpu_samples": sampler.summary()}  # fmt: skip
    run_json = out / "run.json"
    if done.returncode not in (0, 1) or not run_json.is_file():
        row["error"] = _tail(log)
        print(f"[a] {tag}: FAILED (exit {done.returncode}); log {log}", flush=True)
        return row
    rec = json.loads(run_json.read_text())
    usage = rec["usage"]
    row |= {
        "workers": rec.get("workers"),
        "worker_gpus": rec.get("worker_gpus"),
        "stop_reason": rec["stop_reason"],
        "usage": usage,
        "incumbent_id": rec.get("incumbent_id"),
        "candidates": [
            {k: c.get(k) for k in ("id", "family", "verdict", "score", "worker", "gpu", "gpu_s")}
            for c in rec["candidates"]
        ],
    }
    print(f"[a] {tag}: {wall:.1f} s, evaluate {usage.get('eval_wall_s', 0):.1f} s, "
          f"{usage['candidates']} candidates on GPUs {rec.get('worker_gpus')}", flush=True)  # fmt: skip
    return row


def part_a(args: argparse.Namespace, work: Path, gpus: list[str]) -> dict[str, Any]:
    """``aka optimize`` with --workers 1 and --workers 2 (alternating when repeated)."""
    if args.device == "cuda" and len(gpus) < 2:
        return {"skipped": f"{len(gpus)} GPU(s) visible ({gpus}); --workers 2 needs two"}
    problem = _problem(work, args.shapes)
    result: dict[str, Any] = {
        "settings": {
            "problem": str(problem),
            "shapes": args.shapes,
            "candidates": args.candidates,
            "max_iters": args.max_iters,
            "ncu": args.ncu,
            "repeats": args.repeats,
            "kb": False,
            "proposer": "search",
        },  # fmt: skip
    }
    if args.device == "cuda":  # fill the caches both runs share (ceilings, torch.compile times)
        start = time.monotonic()
        warm = subprocess.run(
            [sys.executable, "-m", "aka", "bench", "score", "-p", str(problem), "-c",
             str(RMS_NORM / "candidate.py"), "--json", "--no-cold-check"],
            env=_env(work), capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
        result["warmup"] = {
            "exit_code": warm.returncode,
            "wall_s": round(time.monotonic() - start, 2),
        }
        print(f"[a] warm-up bench score: exit {warm.returncode}, {result['warmup']['wall_s']} s")
    order: list[int] = []
    for r in range(args.repeats):
        order += [1, 2] if r % 2 == 0 else [2, 1]
    runs = [_optimize(problem, n, args, work, f"w{n}_{i}") for i, n in enumerate(order)]
    result["runs"] = runs
    ok = {n: [r for r in runs if r["workers_asked"] == n and "error" not in r] for n in (1, 2)}
    if ok[1] and ok[2]:

        def med(n: int, key: str) -> float:
            values = [r["wall_s"] if key == "wall" else r["usage"]["eval_wall_s"] for r in ok[n]]
            return statistics.median(values)

        def verdicts(r: dict[str, Any]) -> list[tuple[str, str, str]]:
            return [(c["id"], c["family"], c["verdict"]) for c in r["candidates"]]

        result["summary"] = {
            "wall_s": {"1": med(1, "wall"), "2": med(2, "wall")},
            "eval_wall_s": {"1": med(1, "eval"), "2": med(2, "eval")},
            "wall_ratio": round(med(1, "wall") / med(2, "wall"), 3),
            "eval_ratio": round(med(1, "eval") / max(med(2, "eval"), 1e-9), 3),
            "target": RATIO_TARGET,
            "same_verdicts": all(verdicts(r) == verdicts(ok[1][0]) for r in ok[1] + ok[2]),
        }
    return result


def print_a(a: dict[str, Any]) -> None:
    """The runs, then the ratios."""
    print("\n(a) aka optimize, --workers 1 vs 2")
    if "skipped" in a:
        print(f"    skipped: {a['skipped']}")
        return
    print(f"{'run':8} {'workers':>7} {'wall s':>8} {'eval s':>8} {'GPU s':>8} {'cands':>5} "
          f"{'ok':>3} {'per GPU':24} {'stop':12}")  # fmt: skip
    for r in a.get("runs", []):
        if "error" in r:
            print(f"{r['tag']:8} ERROR exit {r['exit_code']}: {r['error'][-200:]!r}")
            continue
        per_gpu: dict[str, int] = {}
        for c in r["candidates"]:
            if c["worker"] is not None:
                key = str(c["gpu"] if c["gpu"] is not None else f"slot{c['worker']}")
                per_gpu[key] = per_gpu.get(key, 0) + 1
        ok = sum(c["verdict"] == "accepted" for c in r["candidates"])
        u = r["usage"]
        print(f"{r['tag']:8} {r['workers']:>7} {r['wall_s']:8.1f} {u['eval_wall_s']:8.1f} "
              f"{u['gpu_s']:8.1f} {u['candidates']:>5} {ok:>3} "
              f"{json.dumps(per_gpu)[:24]:24} {r['stop_reason']:12}")  # fmt: skip
    s = a.get("summary")
    if s:
        verdict = "meets" if s["wall_ratio"] >= s["target"] else "MISSES"
        print(f"wall-time ratio (workers 1 / workers 2): {s['wall_ratio']:.2f}x ({verdict} the "
              f"{s['target']}x target); evaluate node alone: {s['eval_ratio']:.2f}x; "
              f"same verdicts: {s['same_verdicts']}")  # fmt: skip


# ---------------------------------------------------------------- (b) aka serve
def part_b(args: argparse.Namespace, work: Path, gpus: list[str]) -> dict[str, Any]:
    """Two jobs POSTed at once to ``aka serve`` with one slot per GPU."""
    if args.device == "cuda" and len(gpus) < 2:
        return {"skipped": f"{len(gpus)} GPU(s) visible ({gpus}); two slots need two GPUs"}
    import httpx

    from aka.tools import AkaClient

    data = work / "service"
    env = _env(
        work,
        AKA_SERVICE__DATA_DIR=str(data),
        AKA_SERVICE__USE_KB="false",
        AKA_SERVICE__WORKERS="auto" if args.device == "cuda" else "2",
        AKA_AGENT__NCU="false",
    )
    aka = [sys.executable, "-m", "aka"]
    token = make_token(env)
    headers = {"Authorization": f"Bearer {token}"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    client = AkaClient(base, token, timeout_s=120)
    log_path = work / "serve.log"
    body = {
        "operator": args.operator,
        "shapes": [s for s in args.service_shapes.split(",") if s],
        "budget": {"max_iters": 1},
        "device": args.device,
    }
    result: dict[str, Any] = {"request": body, "slots": env["AKA_SERVICE__WORKERS"]}
    with log_path.open("wb") as log:
        server = subprocess.Popen([*aka, "serve", "--host", "127.0.0.1", "--port", str(port)],
                                  env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)  # fmt: skip
        try:
            wait_healthy(base, server, 180)
            t0 = time.monotonic()
            with ThreadPoolExecutor(2) as pool:  # both POSTs at once
                posted = list(pool.map(
                    lambda _: httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=30),
                    range(2),
                ))  # fmt: skip
            for p in posted:
                p.raise_for_status()
            ids = [p.json()["id"] for p in posted]
            print(f"[b] POSTed jobs {ids}", flush=True)
            seen: dict[str, dict[str, float]] = {i: {} for i in ids}
            views: dict[str, dict[str, Any]] = {}
            with GpuSampler() as sampler:
                while len(views) < len(ids) and time.monotonic() - t0 < args.service_timeout:
                    for job_id in ids:
                        if job_id in views:
                            continue
                        view = httpx.get(f"{base}/v1/jobs/{job_id}", headers=headers,
                                         timeout=30).json()  # fmt: skip
                        t = round(time.monotonic() - t0, 2)
                        if view["status"] != "queued":
                            seen[job_id].setdefault("running_s", t)
                        if view["status"] in ("succeeded", "failed", "cancelled"):
                            seen[job_id]["ended_s"] = t
                            views[job_id] = view
                    time.sleep(0.5)
            result["gpu_samples"] = sampler.summary()
            jobs = []
            for job_id in ids:
                view = views.get(job_id) or httpx.get(f"{base}/v1/jobs/{job_id}",
                                                      headers=headers, timeout=30).json()  # fmt: skip
                events = follow(client, job_id, t0, echo=False) if job_id in views else []
                running = [e["data"] for e in events if e.get("event") == "status"
                           and isinstance(e.get("data"), dict) and e["data"].get("worker")]  # fmt: skip
                run_json = data / "jobs" / job_id / "run" / "run.json"
                rec = json.loads(run_json.read_text()) if run_json.is_file() else {}
                jobs.append({
                    "id": job_id,
                    "status": view.get("status"),
                    "error": view.get("error"),
                    "worker": running[-1]["worker"] if running else None,
                    "started_at": view.get("started_at"),
                    "finished_at": view.get("finished_at"),
                    "polled": seen[job_id],
                    "candidate_gpus": sorted({str(c.get("gpu")) for c in rec.get("candidates", [])
                                              if c.get("worker") is not None}),
                    "run_workers": rec.get("workers"),
                    "result": view.get("result"),
                })  # fmt: skip
            result["jobs"] = jobs
            spans = [
                j["polled"] for j in jobs if "running_s" in j["polled"] and "ended_s" in j["polled"]
            ]
            if len(spans) == 2:
                overlap = min(s["ended_s"] for s in spans) - max(s["running_s"] for s in spans)
                shorter = min(s["ended_s"] - s["running_s"] for s in spans)
                result["overlap_s"] = round(max(0.0, overlap), 2)
                result["overlap_share_of_shorter"] = round(max(0.0, overlap) / shorter, 3)
            workers = [j["worker"] for j in jobs]
            result["distinct_slots"] = len(set(workers)) == len(workers) and None not in workers
        except Exception as err:  # noqa: BLE001 - a benchmark reports every failure
            result["error"] = f"{type(err).__name__}: {err}"
        finally:
            client.close()
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
    result["serve_log_tail"] = _tail(log_path)
    return result


def print_b(b: dict[str, Any]) -> None:
    """One line per job, then the overlap."""
    print("\n(b) aka serve, workers auto, two jobs POSTed at once")
    if "skipped" in b:
        print(f"    skipped: {b['skipped']}")
        return
    if "error" in b:
        print(f"    ERROR {b['error']}")
    print(f"{'job':10} {'status':10} {'worker':36} {'candidate GPUs':15} {'running':>8} "
          f"{'ended':>8}")  # fmt: skip
    for j in b.get("jobs", []):
        p = j["polled"]
        print(f"{j['id'][:10]:10} {str(j['status']):10} {str(j['worker'])[-36:]:36} "
              f"{','.join(j['candidate_gpus']):15} {p.get('running_s', '-'):>8} "
              f"{p.get('ended_s', '-'):>8}")  # fmt: skip
    if "overlap_s" in b:
        print(f"running intervals overlap {b['overlap_s']} s ({b['overlap_share_of_shorter']:.0%} of "
              f"the shorter job); each job on its own slot: {b.get('distinct_slots')}")  # fmt: skip


# ---------------------------------------------------------------- (c) interference
class EvalLoop:
    """Evaluate a candidate again and again on one scorer in a thread, until stopped."""

    def __init__(self, scorer: Any, problem: Any, source: str, shape_ids: list[str]) -> None:
        self.scorer, self.problem, self.source, self.shape_ids = scorer, problem, source, shape_ids
        self.done: list[tuple[float, float, str]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> EvalLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                r = self.scorer.evaluate(self.problem, self.source, shape_ids=self.shape_ids)
                self.done.append((start, time.monotonic(), str(r.verdict)))
            except Exception as err:  # noqa: BLE001 - reported, the loop goes on
                self.errors.append(f"{type(err).__name__}: {err}")
                time.sleep(1.0)


def _time_once(scorer: Any, problem: Any, source: str, shape_ids: list[str]) -> dict[str, Any]:
    start = time.monotonic()
    r = scorer.evaluate(problem, source, shape_ids=shape_ids)
    end = time.monotonic()
    shapes = {}
    for row in r.shapes:
        lat = row.latency_us
        shapes[row.shape_id] = {
            "median_us": lat.median if lat else None,
            "iqr_us": lat.iqr if lat else None,
            "n": lat.n if lat else None,
            "raw_us": r.manifest.raw_samples_us.get(row.shape_id),
        }
    return {"verdict": str(r.verdict), "start": start, "end": end, "shapes": shapes}


def part_c(args: argparse.Namespace, work: Path, gpus: list[str]) -> dict[str, Any]:
    """One candidate on GPU 0, alone and while GPU 1 evaluates another; alternating, twice."""
    if args.device != "cuda" or not gpus:
        return {"skipped": "nothing is timed without a GPU"}
    from aka.bench import Scorer
    from aka.core import load_settings
    from aka.spec import Split, load_problem

    settings = load_settings()
    problem = load_problem(_problem(work, args.shapes))
    shape_ids = [s.id for s in problem.shapes_in({Split.TUNE})]
    cache = work / "cache"
    source = (RMS_NORM / "candidate.py").read_text()
    other = (RMS_NORM / "candidate_multirow.py").read_text()
    gpu0 = Scorer(settings.bench, cache, device="cuda", gpu_index=0)
    gpu1 = Scorer(settings.bench, cache, device="cuda", gpu_index=1) if len(gpus) > 1 else None
    result: dict[str, Any] = {"shape_ids": shape_ids, "gpus": gpus[:2], "measurements": []}
    if gpu1 is None:
        result["busy_skipped"] = f"1 GPU visible ({gpus}): no second GPU to load"
    print("[c] warming both scorers (references, ceilings) ...", flush=True)
    with ThreadPoolExecutor(2) as pool:  # references and ceilings cached: every timed run is alike
        warm = [pool.submit(gpu0.evaluate, problem, source, shape_ids=shape_ids)]
        if gpu1 is not None:
            warm.append(pool.submit(gpu1.evaluate, problem, other, shape_ids=shape_ids))
        result["warm_verdicts"] = [str(w.result().verdict) for w in warm]
    for rep in range(args.pairs):
        alone = _time_once(gpu0, problem, source, shape_ids)
        result["measurements"].append({"rep": rep, "load": "alone", **alone})
        print(f"[c] rep {rep} alone: {_medians(alone)}", flush=True)
        if gpu1 is None:
            continue
        with EvalLoop(gpu1, problem, other, shape_ids) as loop:
            time.sleep(args.load_lead_s)  # GPU 1 is into its evaluation before GPU 0 starts
            busy = _time_once(gpu0, problem, source, shape_ids)
        overlapping = [d for d in loop.done if d[0] < busy["end"] and d[1] > busy["start"]]
        result["measurements"].append({
            "rep": rep, "load": "gpu1_evaluating", **busy,
            "gpu1_evaluations_overlapping": len(overlapping) + 1,  # + the one stopped after
            "gpu1_errors": loop.errors,
        })  # fmt: skip
        print(f"[c] rep {rep} GPU 1 busy: {_medians(busy)}", flush=True)
    ratios: dict[str, list[float]] = {}
    alones = [m for m in result["measurements"] if m["load"] == "alone"]
    busies = [m for m in result["measurements"] if m["load"] != "alone"]
    for a, b in zip(alones, busies, strict=False):
        for sid in shape_ids:
            ma, mb = (
                a["shapes"].get(sid, {}).get("median_us"),
                b["shapes"].get(sid, {}).get("median_us"),
            )
            if ma and mb:
                ratios.setdefault(sid, []).append(round(mb / ma, 4))
    result["ratios_busy_over_alone"] = ratios
    flat = [r for rs in ratios.values() for r in rs]
    if flat:
        result["max_deviation"] = round(max(abs(r - 1) for r in flat), 4)
        result["target"] = INTERFERENCE_TARGET
    return result


def _medians(m: dict[str, Any]) -> str:
    return ", ".join(f"{sid} {v['median_us']:.2f} us" if v["median_us"] else f"{sid} -"
                     for sid, v in m["shapes"].items())  # fmt: skip


def print_c(c: dict[str, Any]) -> None:
    """Median per shape and measurement, then the ratios."""
    print("\n(c) timing interference: GPU 0 alone vs while GPU 1 evaluates")
    if "skipped" in c:
        print(f"    skipped: {c['skipped']}")
        return
    if c.get("busy_skipped"):
        print(f"    GPU 1 part skipped: {c['busy_skipped']}")
    ids = c.get("shape_ids", [])
    print(f"{'rep':>3} {'load':16} " + " ".join(f"{sid[:22]:>22}" for sid in ids))
    for m in c.get("measurements", []):
        cells = []
        for sid in ids:
            v = m["shapes"].get(sid, {})
            cells.append(f"{v['median_us']:.2f} ±{v['iqr_us']:.2f}" if v.get("median_us") else "-")
        print(f"{m['rep']:>3} {m['load']:16} " + " ".join(f"{x:>22}" for x in cells))
    for sid, rs in c.get("ratios_busy_over_alone", {}).items():
        print(f"busy/alone {sid}: {', '.join(f'{r:.4f}' for r in rs)}")
    if "max_deviation" in c:
        verdict = "within" if c["max_deviation"] <= c["target"] else "OUTSIDE"
        print(
            f"largest deviation {c['max_deviation']:.2%} ({verdict} the {c['target']:.0%} target)"
        )


# ---------------------------------------------------------------- main
PARTS = {"a": (part_a, print_a), "b": (part_b, print_b), "c": (part_c, print_c)}


def print_all(data: dict[str, Any]) -> None:
    """Every part the data holds, in order."""
    for key, (_, show) in PARTS.items():
        if key in data.get("parts", {}):
            show(data["parts"][key])


def main(argv: list[str] | None = None) -> int:
    """Run the chosen parts (or merge earlier JSON files), print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--parts", default="a,b,c", help="Which of a, b, c to run.")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: check the plumbing in the interpreter (nothing timed).")  # fmt: skip
    parser.add_argument("--shapes", default="decode_b64_h4096,prefill_t4096_h4096",
                        help="rms_norm tune shapes for (a) and (c), or 'all'.")  # fmt: skip
    parser.add_argument("--candidates", type=int, default=8, help="(a) candidates per round.")
    parser.add_argument("--max-iters", type=int, default=1, help="(a) rounds.")
    parser.add_argument("--repeats", type=int, default=1,
                        help="(a) pairs of runs; order 1,2 then 2,1 ... (medians reported).")  # fmt: skip
    parser.add_argument("--ncu", action="store_true", help="(a) profile with Nsight Compute.")
    parser.add_argument("--operator", default="rms_norm", help="(b) atrex30 operator of both jobs.")
    parser.add_argument("--service-shapes", default="0,7", help="(b) its tune shape ids.")
    parser.add_argument("--service-timeout", type=float, default=480.0, help="(b) seconds.")
    parser.add_argument("--pairs", type=int, default=2, help="(c) alone/busy pairs.")
    parser.add_argument("--load-lead-s", type=float, default=3.0,
                        help="(c) seconds GPU 1 works before GPU 0's busy measurement starts.")  # fmt: skip
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--merge", nargs="*", type=Path, help="Join earlier JSON files.")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.merge is not None:
        merged: dict[str, Any] = {"benchmark": "multi_gpu", "header": None, "parts": {}}
        for path in args.merge:
            part = json.loads(path.read_text())
            merged["header"] = merged["header"] or part["header"]
            merged["parts"] |= part["parts"]
        target = args.out / f"multi_gpu_{merged['header']['date'][:10]}.json"
        target.write_text(json.dumps(merged, indent=1) + "\n")
        print_all(merged)
        print(f"\nwrote {target}")
        return 0
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts {unknown}: choose from a, b, c")
    from aka.hardware import visible_gpus

    gpus = visible_gpus() if args.device == "cuda" else ["cpu0", "cpu1"]
    if args.device == "cuda" and not gpus:
        print("no GPU visible: nothing to measure (use --device cpu to check the plumbing)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="aka-multi-gpu-"))
    print(f"visible GPUs: {gpus}; logs, runs and service data under {work}", flush=True)
    data: dict[str, Any] = {"benchmark": "multi_gpu", "header": _header(args.device), "parts": {},
                            "settings": vars(args) | {"out": str(args.out), "merge": None}}  # fmt: skip
    date = data["header"]["date"][:10]
    name = f"multi_gpu_{date}" + ("" if parts == list(PARTS) else f"_{''.join(parts)}")
    name += "_cpu" if args.device == "cpu" else ""
    target = args.out / f"{name}.json"
    for key in parts:
        run, show = PARTS[key]
        start = time.monotonic()
        try:
            data["parts"][key] = run(args, work, gpus)
        except Exception as err:  # noqa: BLE001 - a benchmark reports every failure and goes on
            data["parts"][key] = {"error": f"{type(err).__name__}: {err}"}
        data["parts"][key]["part_wall_s"] = round(time.monotonic() - start, 1)
        target.write_text(json.dumps(data, indent=1, default=str) + "\n")  # after each part
        show(data["parts"][key])
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

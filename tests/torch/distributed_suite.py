"""PyTorch's own distributed test suite against remora-torch.

torch.testing._internal.distributed.distributed_test (what PyTorch's
test_distributed_spawn.py runs for gloo and nccl) with BACKEND=remora, declared a
plugin backend with DDP and sub-group support, the way torch-ucc runs it. Each test
spawns WORLD_SIZE processes (2 by default) that meet through a file store.

Tests listed in distributed_suite_exclusions.txt (next to this file) are skipped with
their reason, without spawning anything; the suite skips others itself (each with its
reason). That file's [ci-time] section is what CI leaves out for time; --all runs
those too. Run with the interpreter of the environment that has torch and remora-torch:

    python tests/torch/distributed_suite.py [--all] [--list] [--report FILE] [-k PATTERN ...]

DIST_SUITE_START=spawn starts the ranks as PyTorch's CI does (a fresh interpreter per
rank and test) instead of forking them from this process (the default: 20x faster).

Prints one line per test (ok, skipped with the reason, FAIL, ERROR) and a summary;
--report writes every test's outcome, reason and seconds to FILE. Exits non-zero when
a test failed or an exclusion names a test the suite does not have.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXCLUSIONS = HERE / "distributed_suite_exclusions.txt"

# Set before the suite is imported: it reads them at import time. Spawned ranks
# import this file again and inherit them.
os.environ.setdefault("BACKEND", "remora")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:  # the ranks inherit it (spawned ones import this again)
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="remora-dist-suite-")
    atexit.register(shutil.rmtree, os.environ["TEMP_DIR"], ignore_errors=True)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("DIST_SUITE_START", "fork")

import remora_torch  # noqa: E402,F401  registers the backend
import torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

for feature in ("plugin", "ddp", "subgroup"):
    DistTestCases.backend_feature[feature].add(os.environ["BACKEND"])

from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        # fork (the default here): the ranks start from this process, torch already
        # imported, in well under a second; spawn (PyTorch's own CI) imports torch again
        # in every rank of every test, about 10 s a test on two cores.
        if os.environ["DIST_SUITE_START"] == "spawn":
            self._spawn_processes()
        else:
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


# Tests the suite gates by backend name (to gloo, MPI, or its set of "gpu" backends,
# which includes gloo on CPU) although they run on any CPU backend with the operations
# they use, which remora-torch has: run here over remora too. The gate is a skip flag
# on the test function, which ungate() clears; so every test listed was read for other
# gates that the flag also stands for (none, or they hold at 2 ranks on CPU).
# Name -> what it needs.
UNGATED = {
    **{f"test_all_reduce_coalesced{g}_{op}": "all_reduce_coalesced (gated to gloo)"
       for g in ("", "_full_group") for op in ("sum", "product", "min", "max")},
    **{f"test_all_to_all{g}": "all_to_all on CPU (gated to MPI)" for g in ("", "_complex", "_full_group")},
    **{f"test_all_to_all_single_{split}{g}": "all_to_all_single on CPU (gated to MPI)"
       for split in ("equal_split", "unequal_split") for g in ("", "_complex", "_full_group")},
    "test_batch_isend_irecv_gloo": "batch_isend_irecv on CPU (named for gloo)",
    "test_batch_isend_irecv_gloo_tags": "batch_isend_irecv with tags on CPU (named for gloo)",
    "test_get_future": "Work.get_future (gated to MPI, NCCL and gloo)",
    "test_all_gather_object_default_pg": "all_gather_object on CPU (gated to the suite's 'gpu' backends, gloo among "
                                         "them)",
    "test_all_gather_object_subgroup": "all_gather_object in a subgroup on CPU, also under "
                                       "TORCH_DISTRIBUTED_DEBUG=DETAIL (gated to the 'gpu' backends)",
    "test_scatter_object_list": "scatter_object_list on CPU (gated to gloo)",
    "test_grads_same_across_ranks_with_no_sync": "DDP no_sync on CPU (gated to gloo)",
}


# Tests the suite also gates by backend name that stay skipped here, and why (the
# report adds this to the suite's reason). Found by running them un-gated, and reading them.
STAYS_GATED = {
    **{name: "under the name gate, the DDP test needs 2 accelerators (skip_if_lt_x_gpu)" for name in (
        "test_compute_bucket_assignment_by_size_sparse_error_without_logger", "test_ddp_bucket_cap_mb_list",
        "test_ddp_build_debug_param_to_name_mapping", "test_ddp_control_flow_different_across_ranks",
        "test_ddp_control_flow_same_across_ranks", "test_ddp_device", "test_ddp_device_mesh_initialization",
        "test_ddp_forward_backward_hook", "test_ddp_ignore_params_arg", "test_ddp_model_diff_num_params_across_ranks",
        "test_ddp_multiple_nested_unused_params_err_ignore_params", "test_ddp_multiple_nested_unused_params_error",
        "test_ddp_namedtuple", "test_ddp_profiling_torch_profiler", "test_ddp_shared_grad_acc_unused_params",
        "test_ddp_unused_params_rebuild_buckets_exception", "test_different_graph_across_ranks",
        "test_invalid_static_graph", "test_skip_all_reduce_unused_parameters", "test_verify_model_across_rank_with_logger",
        "test_verify_model_across_rank_without_logger", "test_static_graph_multi_forward", "test_sync_bn_logged")},
    **{name: "under the name gate, the test needs exactly 4 ranks" for name in (
        "test_gather_object", "test_gather_object_subgroup")},
    **{name: "under the name gate, the test needs 8 ranks (skip_if_small_worldsize)" for name in (
        "test_all_reduce_coalesced_group_sum", "test_all_reduce_coalesced_group_product",
        "test_all_reduce_coalesced_group_min", "test_all_reduce_coalesced_group_max", "test_all_to_all_group",
        "test_all_to_all_single_equal_split_group", "test_all_to_all_single_unequal_split_group",
        "test_barrier_timeout_group")},
    **{name: "monitored_barrier: torch.distributed implements it for gloo only" for name in (
        "test_monitored_barrier_allreduce_hang", "test_monitored_barrier_allreduce_hang_wait_all_ranks",
        "test_monitored_barrier_failure_order", "test_monitored_barrier_gloo", "test_monitored_barrier_gloo_rank_0_timeout",
        "test_monitored_barrier_gloo_subgroup", "test_monitored_barrier_wait_all_ranks")},
    **{name: "the test builds its model only for the backends it names (an unbound variable otherwise)" for name in (
        "test_accumulate_gradients_no_sync", "test_accumulate_gradients_no_sync_grad_is_view",
        "test_accumulate_gradients_no_sync_allreduce_hook", "test_accumulate_gradients_no_sync_allreduce_with_then_hook")},
    **{name: "the test expects gloo's timeout message and a wall-clock bound, and re-initialises through "
             "INIT_METHOD; remora's timeouts are tested in tests/torch/ops_check.py" for name in (
        "test_barrier_timeout_global", "test_barrier_timeout_full_group")},
    **{name: "sparse allreduce: remora-torch does not support sparse tensors" for name in (
        "test_sparse_all_reduce_sum", "test_sparse_all_reduce_sum_cuda")},
    "test_broadcast_object_list": "PyTorch disables it (unittest.skip: failing, pytorch/pytorch#113620)",
}


def ungate(names: list[str]) -> None:
    """Runs the UNGATED tests: their skip flag is the suite's gate by backend name."""
    for name in names:
        fn = getattr(TestDistBackendWithSpawn, name)
        if name in UNGATED and getattr(fn, "__unittest_skip__", False):
            fn.__unittest_skip__ = False


def read_exclusions(path: Path = EXCLUSIONS) -> dict[str, tuple[str, str]]:
    """test name -> (section, reason). The file has `[section]` headers; a
    `# reason: ...` line gives the reason of the names after it, until the next one;
    `name  # reason` gives one name its own; other `#` lines are comments."""
    out: dict[str, tuple[str, str]] = {}
    section = reason = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section, reason = line[1:-1], ""
        elif line.startswith("# reason:"):
            reason = line[len("# reason:"):].strip()
        elif not line.startswith("#"):
            name, _, own = line.partition("#")
            name, why = name.strip(), own.strip() or reason
            if not why or not section:
                raise ValueError(f"{path}: {name} has no {'reason' if section else 'section'}")
            if name in out:
                raise ValueError(f"{path}: {name} is listed twice")
            out[name] = (section, why)
    return out


class Result(unittest.TextTestResult):
    """Times every test and keeps each one's outcome and reason."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes: list[tuple[str, str, str, float]] = []
        self._start = 0.0

    def startTest(self, test):
        self._start = time.monotonic()
        super().startTest(test)

    def _note(self, test, outcome: str, reason: str = "") -> None:
        self.outcomes.append((test._testMethodName, outcome, reason, time.monotonic() - self._start))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._note(test, "ok")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if test._testMethodName in STAYS_GATED:
            reason = f"{reason} ({STAYS_GATED[test._testMethodName]})"
        self._note(test, "skipped", reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._note(test, "FAIL", str(err[1]).splitlines()[0] if str(err[1]) else err[0].__name__)

    def addError(self, test, err):
        super().addError(test, err)
        self._note(test, "ERROR", str(err[1]).splitlines()[0] if str(err[1]) else err[0].__name__)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._note(test, "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._note(test, "UNEXPECTED SUCCESS")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", action="append", default=[], help="run tests whose name contains this (repeatable)")
    parser.add_argument("--all", action="store_true", help="run the [ci-time] exclusions too")
    parser.add_argument("--list", action="store_true", help="list the tests and what is excluded, run nothing")
    parser.add_argument("--report", type=Path, help="write every test's outcome, reason and seconds here")
    args = parser.parse_args(argv)

    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    missing = sorted((set(UNGATED) | set(STAYS_GATED)) - set(names))
    if missing:
        print(f"UNGATED or STAYS_GATED name tests the suite does not have: {missing}", file=sys.stderr)
        return 2
    ungate(names)
    exclusions = {name: f"{why} [{section}]" for name, (section, why) in read_exclusions().items()
                  if not (args.all and section == "ci-time")}
    unknown = sorted(set(read_exclusions()) - set(names))
    if unknown:
        print(f"{EXCLUSIONS.name} names tests the suite does not have: {unknown}", file=sys.stderr)
        return 2
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    for name in names:
        if name in exclusions:
            setattr(TestDistBackendWithSpawn, name, unittest.skip(f"excluded: {exclusions[name]}")(
                getattr(TestDistBackendWithSpawn, name)))
    if args.list:
        for name in names:
            print(f"{name}\t{'excluded: ' + exclusions[name] if name in exclusions else 'runs'}")
        return 0

    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=Result)
    start = time.monotonic()
    result = runner.run(suite)
    took = time.monotonic() - start
    counts: dict[str, int] = {}
    for _, outcome, reason, _ in result.outcomes:
        key = "excluded" if reason.startswith("excluded:") else outcome
        counts[key] = counts.get(key, 0) + 1
    print(f"distributed suite over {os.environ['BACKEND']}, {os.environ['WORLD_SIZE']} ranks, torch {torch.__version__}: "
          + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f" in {took:.0f} s", flush=True)
    if args.report:
        with args.report.open("w") as f:
            for name, outcome, reason, secs in result.outcomes:
                f.write(f"{name}\t{outcome}\t{secs:.1f}\t{reason}\n")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Paired A/B measurement: baseline and candidate interleaved on the same GPU.

This is what the merge gate uses. Each side runs in its own long-lived
subprocess (its own environment: two library versions cannot share one
interpreter), holding its inputs, warm caches and, for launch-bound kernels,
its CUDA graph. A coordinator asks them in turn for *blocks* of samples in ABBA
order, so slow drifts of clocks and temperature hit both sides alike, and
judges the ratio B/A from paired groups of blocks:

    group g:  A B B A (even g) or B A A B (odd g)  ->  r_g = (b1 + b2) / (a1 + a2)

The log-ratios of the groups give a mean and a Student-t interval. Sampling is
adaptive: more groups while the interval still straddles the decision, within a
time budget. The protocol between coordinator and sides is JSON lines on
stdin/stdout, so a side is any Python that can import this module; the side keeps its
stdout for the replies and sends what the kernel under test prints, from Python or C,
to its stderr (``_protocol_stdout``), the coordinator's log.

A fixed offset belongs to each side process: on the H200 the same bf16 GEMM
measured 0.6 % slower in one process than in another for 20 trials in a row, and
swapping the two processes' roles flipped its sign (docs/measurement.md, runs 5
and 8); on an fp32 add each process sat in one of two states ~0.6 % apart (run
11). So ``compare`` takes m process pairs per side, spreads the groups over them
and computes the interval over the pairs: process offsets widen the interval
instead of biasing the ratio. Within a process each side may also build its case
``placements`` times behind padding allocations of random size (group g measures
placement g mod K); with one pair the interval is then taken over placements.

A *case factory* (``module:function``) builds ``(call, inputs)`` from JSON
params inside each side; both sides get the same factory and params, and differ
only in what their environment imports (or, in benchmarks, in injected work).
A factory may add a third element, a JSON object that goes back with the set-up
reply (paired_suite: the side's correctness check), and an exception with a
``details`` object sends it with the error. Each block reply carries the SM clock
and throttle reasons read after it; one throttled block makes the comparison
unreliable, and an unreliable comparison is never a regression.

Short kernels (under ``TimerConfig.graph_below_s``, 50 us) are sampled as CUDA
graphs of many calls, and with a cold L2 the graph rotates over enough input
copies to exceed twice the L2 (``timing._CudaSampler``): the same sampler as
``kernelwatch bench``, so paired blocks of a 12 us GEMM are graph replays too.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import logging
import math
import os
import random
import select
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TextIO

from kernelwatch.kernels import stats
from kernelwatch.kernels.exits import describe_exit
from kernelwatch.kernels.launch import role_launch_s
from kernelwatch.kernels.telemetry import blocks_reliable
from kernelwatch.kernels.timing import Sampler, TimerConfig, make_sampler
from kernelwatch.kernels.verdict import CONFIDENCE, MIN_EFFECT, CaseVerdict, decide

# --------------------------------------------------------------------------- side process

# A case factory: ``(call, inputs)``, or ``(call, inputs, info)`` with a JSON object
# for the coordinator (paired_suite: the case's correctness check).
Factory = Callable[..., tuple[Any, ...]]


def serve(stdin: Any = None, stdout: Any = None) -> None:
    """The side's loop: ``setup`` a case, then answer ``block`` requests until ``quit``.

    Without ``stdout`` the replies go to this process's stdout, kept for them alone
    (``_protocol_stdout``): whatever the kernel under test prints goes to stderr.
    """
    stdin = stdin or _protocol_stdin()
    stdout = stdout or _protocol_stdout()
    samplers: list[Sampler] = []
    pads: list[Any] = []  # held, never read: the padding allocations stay while sampled
    for line in stdin:
        msg = json.loads(line)
        cmd = msg.get("cmd")
        try:
            if cmd == "hello":
                reply: dict[str, Any] = {"ok": True, **_hello()}
            elif cmd == "setup":
                samplers, pads = [], []  # the previous case's memory is free for reuse
                began = time.perf_counter()
                samplers, pads, info = _setup(
                    _load(msg["factory"]),
                    msg.get("params", {}),
                    TimerConfig(**msg.get("timer", {})),
                    int(msg.get("placements", 1)),
                    new_placement=bool(msg.get("new_placement", False)),
                )
                reply = {
                    "ok": True,
                    **samplers[0].describe(),
                    "placements": len(samplers),
                    "info": info,
                    "device": _side_device(),
                    "setup_s": time.perf_counter() - began,
                }
            elif cmd == "release":  # another case will not fit beside this one's memory
                samplers.clear()
                pads.clear()
                _release_memory()
                reply = {"ok": True}
            elif cmd == "block":
                assert samplers, "block before setup"
                chosen = samplers[int(msg.get("placement", 0)) % len(samplers)]
                before, mark = chosen.late_samples(), chosen.launch_mark()
                values = chosen.block(int(msg["samples"]))
                after = chosen.late_samples()
                chosen.probe_launch()  # this side alone on the host: set-up's were crowded
                launches = chosen.launches_since(mark)
                reply = {
                    "ok": True,
                    "values": values,
                    "clock": chosen.last_clock(),
                    "reasons": chosen.last_reasons(),
                    # samples of this block the host queued late (retaken, kept anyway)
                    "host_late": [n - m for n, m in zip(after, before, strict=True)],
                    # the host's median time to queue one call in this block (None off-GPU)
                    "host_launch_s": stats.median(launches) if launches else None,
                }
            elif cmd == "quit":
                reply = {"ok": True}
                stdout.write(json.dumps(reply) + "\n")
                stdout.flush()
                return
            else:
                reply = {"ok": False, "error": f"unknown command {cmd!r}"}
        except Exception as exc:  # reported to the coordinator, the side stays alive
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            details = getattr(exc, "details", None)  # e.g. a broken case's errors
            if isinstance(details, dict):
                reply["details"] = details
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


def _protocol_stdout() -> TextIO:
    """A private copy of this process's stdout for the replies; fd 1 goes to stderr.

    The kernel under test runs in this process, and every ``print`` of it, or a C
    extension's ``printf`` (fd 1 itself), went into the replies the coordinator parses:
    one line of it ended the whole paired run ("runner exit code 1", a JSONDecodeError)
    where the unpaired runner times the case. From here on ``sys.stdout`` is
    ``sys.stderr`` and fd 1 a copy of fd 2, so both kinds of output join the side's
    stderr, which it shares with the coordinator: under the worker, one capped log that
    is drained as it is written (``worker/process.py``), so a flood can neither fill a
    pipe nor memory, and it ends the case as "log over the N MB cap; runner killed", as
    in the unpaired runner. The copy is not inheritable: the kernel's own subprocesses
    do not get it either.
    """
    sys.stdout.flush()
    protocol = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol, "w", encoding="utf-8", buffering=1)


def _protocol_stdin() -> TextIO:
    """A private copy of this process's stdin for the commands; fd 0 reads /dev/null.

    The commands come on stdin, and a kernel (or a tool it starts without ``stdin=``)
    that reads its stdin would swallow them: the coordinator would wait for replies
    to commands the side never saw. Not inheritable, as the stdout copy."""
    protocol = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115  # lives as long as the side
    return os.fdopen(protocol, "r", encoding="utf-8", errors="replace")


_DEVICE: dict[str, Any] = {}


def _hello() -> dict[str, Any]:
    """The side's start-up, measured: its CUDA context made now, not inside a case.

    The coordinator times spawn → this reply (interpreter, imports, context); the
    side says how much of it the context took, so a case's cost can name both.
    """
    import torch

    began = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
    cuda_s = time.perf_counter() - began
    from kernelwatch.kernels.device import describe_environment

    # the side's own interpreter, torch and Triton: the record's ``environment`` is the
    # candidate side's (a role may run another interpreter than the coordinator)
    env = describe_environment()
    return {"pid": os.getpid(), "cuda_s": cuda_s, "at": time.time(), "environment": env}


def _side_device() -> dict[str, Any]:
    """The card this side measures on (name, class, UUID, ...), described once a process.

    The coordinator never opens a CUDA context of its own, so the paired record's card
    comes from a side: history tells cards of one class apart by it (per-card offsets).
    """
    if not _DEVICE:
        import torch

        from kernelwatch.kernels.device import describe_device

        dev = (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
        _DEVICE.update(describe_device(dev))
    return dict(_DEVICE)


def _release_memory() -> None:
    """Give this process's GPU memory back: the samplers' reference cycles, then the cache."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _setup(
    factory: Factory,
    params: dict[str, Any],
    timer: TimerConfig,
    placements: int,
    new_placement: bool = False,
) -> tuple[list[Sampler], list[Any], dict[str, Any]]:
    """Build the case ``placements`` times, each behind a padding allocation of random size.

    The first instance sits where the allocator puts it, unless ``new_placement`` asks
    for a pad before it too: the screen's set-up again of an off side. Without one the
    allocator (and, in a new process, the driver) hands the inputs the memory the off
    set-up had just freed. On the H200 (2026-12-04, docs/measurement.md §16f) FlashInfer
    decode's off sides stayed +24-29 % slow in the same slots through set-ups again and
    new processes, as a placement that is drawn again the same way would.

    Only the first instance warms the clocks up; the others find them warm. A factory
    may return ``(call, inputs, info)``: the first instance's ``info`` (a JSON object,
    e.g. the correctness check) goes back to the coordinator with the set-up reply;
    ``"cuda_graph": false`` in it times that instance without CUDA graphs.
    """
    import torch

    # The previous case's samplers hold reference cycles (their sampling closures);
    # without a collection their GPU memory piles up setup after setup (an H200 ran
    # out of its 141 GB after ~50 setups of 8 placements).
    _release_memory()
    cuda = torch.cuda.is_available()
    rng = random.Random()
    samplers: list[Sampler] = []
    pads: list[Any] = []
    info: dict[str, Any] = {}
    # placement is a GPU memory effect: on the CPU path one instance is the case
    for i in range(max(1, placements if cuda else 1)):
        if (i or new_placement) and cuda:  # 2 MB granules: the allocator's and large pages
            # a case that fills the card keeps its old placement rather than failing
            with contextlib.suppress(torch.cuda.OutOfMemoryError):
                pads.append(
                    torch.empty(rng.randint(1, 256) * 2**21, dtype=torch.uint8, device="cuda")
                )
        cfg = timer if i == 0 else replace(timer, min_warmup_s=0.0, max_warmup_s=0.03)
        built = factory(**params)
        call, inputs = built[0], built[1]
        extra = dict(built[2]) if len(built) > 2 else {}
        if i == 0:
            info = extra
        if extra.get("cuda_graph") is False:  # e.g. NCCL across devices: never captured
            cfg = replace(cfg, cuda_graph=False)
        samplers.append(make_sampler(call, inputs, cfg))
    return samplers, pads, info


def _load(target: str) -> Factory:
    module, func = target.split(":")
    fn: Factory = getattr(importlib.import_module(module), func)
    return fn


# --------------------------------------------------------------------------- coordinator


# Progress of a comparison, one line per step (set-up, screen round, replacements,
# judgement): a case that runs past its limit on a GPU host leaves where its time went
# in the side's log instead of its start line alone (2026-12-03). The worker's entry
# (``paired_suite.main``) sends it to stderr; a person's ``bench-paired`` keeps it quiet.
log = logging.getLogger(__name__)


class SideError(RuntimeError):
    """The side answered with an error (``remote``: its ``Type: message`` text).

    details: what the side's exception carried besides its message (its
    ``details`` attribute, e.g. the errors of a failed correctness check).
    also: the other sides' errors of the same command (``_receive_all`` raises the
    first, candidates' first; a baseline that failed its check too is among these).
    """

    def __init__(
        self,
        message: str,
        remote: str = "",
        side: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.remote, self.side = remote, side
        self.details: dict[str, Any] = details or {}
        self.also: list[SideError] = []


# ``PairedResult.stop_reason`` of a comparison whose screen left more than half its
# pairs off (``compare``): no group timed, the verdict inconclusive
UNSTEADY = "unsteady"
# the stop reason of a comparison whose pairs had all the rounds they may have
ROUNDS_MAX = "rounds_max"
# the stop reason of a comparison whose interval more rounds would barely narrow: its
# pairs' offsets set the width, not its groups' noise (``narrowing_left``)
SETUP_BOUND = "setup_bound"


class SideDied(RuntimeError):
    """The side process exited (a crash: segfault, abort, killed for memory), or wrote
    something other than a reply where its reply belonged and was killed."""


class SideTimeout(RuntimeError):
    """The side did not answer in time and was killed (a hang)."""


# the role each side's name begins with: A0, A1, ... the baseline; B0, B1, ... the candidate
ROLES = {"A": "baseline", "B": "candidate"}
# what of a line that is not a reply an error quotes
QUOTED_CHARS = 200


def role_of(name: str) -> str:
    """``baseline`` or ``candidate`` for a side named ``A``/``B`` (``A3``, ``B0``, ...);
    ``side <name>`` for another name."""
    return ROLES.get(name[:1], f"side {name}")


class Side:
    """One side (A or B): a subprocess speaking the JSON-lines protocol."""

    def __init__(
        self,
        name: str,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        hello: bool = False,
    ) -> None:
        """Spawn the side; with ``hello`` it makes its CUDA context at once (``ready``).

        Its stderr is this process's: what the kernel under test prints joins the
        coordinator's log (``_protocol_stdout``).
        """
        self.rename(name)
        self.spawned = time.time()  # wall clock: the side's ``hello`` says when it was ready
        self.proc = subprocess.Popen(
            [python, "-m", "kernelwatch.kernels.paired"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",  # a stray byte is quoted in an error, never a decode crash
            env={**os.environ, **(env or {})},
            bufsize=1,
        )
        self.started: dict[str, float] | None = None  # ``ready``'s answer, once read
        self.environment: dict[str, Any] = {}  # the side's python, torch, triton (``ready``)
        # comparisons in which the screen found this process off: one that is off again
        # in a later comparison relapsed after its set-up again in place (``_Screen``)
        self.found_off = 0
        # the cases (``paired_suite.warm_key``) a spare set up once, so that its next
        # set-up of one of them is warm (``paired_suite._Sides.warm``)
        self.warmed: set[str] = set()
        self._hello_sent = False
        if hello:
            self.send({"cmd": "hello"})
            self._hello_sent = True

    def ready(self, timeout_s: float | None = None) -> dict[str, float]:
        """Wait for the start-up: ``{"start_s": spawn to ready, "cuda_s": the context}``.

        ``start_s`` counts the interpreter, the imports (torch) and the CUDA context, by
        the side's own clock (a spare pool read later does not count its idle time);
        a side spawned without ``hello`` is asked now. Read once; later calls return it.
        """
        if self.started is None:
            if not self._hello_sent:
                self.send({"cmd": "hello"})
                self._hello_sent = True
            reply = self.receive("hello", timeout_s)
            self.started = {
                "start_s": float(reply.get("at", time.time())) - self.spawned,
                "cuda_s": float(reply.get("cuda_s", 0.0)),
            }
            if isinstance(reply.get("environment"), dict):
                self.environment = reply["environment"]
        return self.started

    def ask(self, msg: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply line.

        ``timeout_s``: a side that has not answered by then (a hung kernel) is
        killed and ``SideTimeout`` raised; a side that died raises ``SideDied``.
        """
        self.send(msg)
        return self.receive(str(msg.get("cmd")), timeout_s)

    def send(self, msg: dict[str, Any]) -> None:
        """Send without waiting, so several sides can set up at once (``receive`` after)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._died() from None

    def receive(self, cmd: str, timeout_s: float | None = None) -> dict[str, Any]:
        """The reply to the command sent last (see ``ask``)."""
        assert self.proc.stdout is not None
        if timeout_s is not None:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            if not ready:
                self.proc.kill()
                self.proc.wait()
                # the unpaired runner's words: "case timed out after 60s; killed"
                raise SideTimeout(f"{self.who} timed out after {timeout_s:g}s on {cmd!r}; killed")
        line = self.proc.stdout.readline()
        if not line:
            raise self._died()
        try:
            reply = json.loads(line)
        except ValueError:  # JSONDecodeError, or a line that is not text
            reply = None
        if not isinstance(reply, dict):
            # the side's own stdout carries nothing else (``_protocol_stdout``); should
            # anything else come, the replies after it are out of step: replace the side
            self.proc.kill()
            self.proc.wait()
            said = line.rstrip("\n")
            quoted = repr(said[:QUOTED_CHARS]) + (" ..." if len(said) > QUOTED_CHARS else "")
            raise SideDied(
                f"{self.who} wrote {quoted} where its reply to {cmd!r} belonged, not a "
                "line of the paired protocol; killed"
            )
        if not reply.get("ok"):
            raise SideError(
                f"{self.who}: {reply.get('error')}",
                str(reply.get("error")),
                self.name,
                reply.get("details") if isinstance(reply.get("details"), dict) else None,
            )
        return reply

    def _died(self) -> SideDied:
        """The side's end in the runner's words: ``candidate (side B) killed by SIGSEGV``."""
        return SideDied(f"{self.who} {describe_exit(self.proc.wait())}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rename(self, name: str) -> None:
        """Take another side's name (a spare taking a replaced side's place): the name
        lives only here, in logs and screen rows, never in the process. Errors name
        the role first, as the unpaired runner's name the runner."""
        self.name = name
        self.who = f"{role_of(name)} (side {name})" if name[:1] in ROLES else role_of(name)

    def close(self, grace_s: float = 10.0) -> None:
        """Ask the side to quit and reap it; one still busy after ``grace_s`` is killed."""
        self.request_quit()
        self.reap(time.monotonic() + grace_s)

    def request_quit(self) -> None:
        """Send ``quit`` and close stdin without waiting for the reply: a side still
        importing torch (just restarted) or stuck in a kernel must not hold the caller."""
        with contextlib.suppress(Exception):
            self.send({"cmd": "quit"})
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # a dead side: its pipe is broken
                self.proc.stdin.close()

    def reap(self, deadline: float) -> None:
        """Wait for the exit until ``deadline`` (a monotonic time), then kill."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()


@dataclass
class PairedConfig:
    """How long to compare, and what counts.

    min_effect: smallest relative change worth a verdict. 1 %: on the H200 a +1 %
      GEMM slowdown was flagged 20/20 with 0/20 A/A alarms, while fixed offsets of
      up to 0.6 % between two processes masked +0.5 % (docs/measurement.md, runs 5-6).
    confidence: two-sided level of the ratio's interval.
    block_s: target length of one block; groups_min/groups_step: adaptivity.
    placements: instances of the case per side at different addresses (see above).
    ask_timeout_s: longest wait for one set-up or block; the side is then killed.
    budget_s: wall time for the whole comparison (blocks only, after setup).
    rounds_max: groups per pair at most in one comparison: a short kernel's offsets
      belong to the set-up (H200, 2026-12-02: a 12 us GEMM's pair ratios stayed within
      0.1 % of their own for 48 groups while the pairs spread by 2 %), so beyond a few
      rounds a re-measure with new set-ups buys more than more blocks.
    screen_tol: a side slower than this beyond its role's reference level
      (``_Screen.reference``), and beyond its pair partner or with its partner slow
      too, is set up again (in a new process from the second time on, where
      ``compare`` is given ``respawn`` and new processes cure), up to
      ``screen_retries`` times, then left out with its pair (see ``compare``). 0 turns
      the screen off; it needs 3 pairs.
    setup_one_at_a_time: set the sides up one after another instead of all at once
      (an experiment: whether a side set up beside 15 others starts in the slow state
      of docs/measurement.md §11; it costs the sum of the set-ups instead of the
      slowest).
    screen_delay_s: seconds to wait after a comparison's set-up before the screen
      measures anything (an experiment: whether the storm of SDPA's varlen MHA prefill,
      5-14 of 16 sides 1.1-5x slow at the screen's first round of every cold pass, is a
      transient after the set-up; on an H100, 2026-12-07, docs/measurement.md §34c, it
      stormed with 3 s as without). 0: off.
    setup_bound: an inconclusive comparison of m >= 3 pairs stops after two rounds or
      more once ``rounds_max`` rounds would narrow its interval by less than this share
      (``narrowing_left``; stop reason ``setup_bound``), and the stage's next attempt
      draws new set-ups. On an H100 (2026-12-06, docs/measurement.md §27) three decode
      cases of 18-112 us spent 4.6-5.1 s of blocks in a first attempt whose interval
      did not move from the first round to the sixth ([0.9988, 1.0140] after 8 groups,
      [0.9991, 1.0137] after 43), then decided in a second attempt after 8-16 groups.
      The rule reads only the spread of the groups, never where the ratio lies, so it
      cannot steer a verdict. 0: off.
    short_remeasure_s: after the fixed re-measures, a stage still inconclusive measures
      again while it has spent less than this (seconds of wall, the next attempt's
      expected cost included), up to ``attempts_max`` attempts in all, with no larger
      budget; with it on, every attempt after one that ran into ``rounds_max`` (the fixed
      re-measures too) times ``short_rounds`` rounds. Only cheap attempts fit, i.e. short
      kernels, and those are the ones whose interval is set by how many set-ups it has
      seen: on the H200 (2026-12-04, docs/measurement.md §15) a 16 us GEMM's pairs spread
      by 0.8-1.0 % per set-up, an attempt's interval was as wide after 48 groups as after 8,
      and a +1 % ended inconclusive in 4 of 9 trials after three attempts. 0: off.
    """

    min_effect: float = MIN_EFFECT
    confidence: float = CONFIDENCE  # one stage of two (kernels/verdict.py)
    block_s: float = 0.02
    groups_min: int = 8
    groups_step: int = 4
    groups_max: int = 200
    budget_s: float = 5.0
    placements: int = 8
    ask_timeout_s: float | None = None  # per set-up or block: a hung kernel is killed
    screen_tol: float = 0.05
    screen_retries: int = 2
    rounds_max: int = 6
    setup_bound: float = 0.05
    setup_one_at_a_time: bool = False
    screen_delay_s: float = 0.0
    short_remeasure_s: float = 0.0
    short_rounds: int = 2
    attempts_max: int = 16
    timer: dict[str, Any] = field(default_factory=dict)  # TimerConfig fields for the sides


@dataclass
class PairedResult:
    ratio: float  # B / A, > 1 means B is slower
    ci_low: float
    ci_high: float
    groups: int
    verdict: str  # a timing verdict of kernels/verdict.py (regression ... inconclusive)
    stop_reason: str
    seconds: float
    a_median: float
    b_median: float
    group_ratios: list[float] = field(default_factory=list)
    clocks: list[int] = field(default_factory=list)
    placements: list[int] = field(default_factory=list)  # the placement of each group
    pairs: list[int] = field(default_factory=list)  # the process pair of each group
    # the unit the interval was taken over, per group (None: groups are independent)
    clusters: list[int] | None = None
    a_blocks: list[float] = field(default_factory=list)  # block medians, seconds per call
    b_blocks: list[float] = field(default_factory=list)
    describe_b: dict[str, Any] = field(default_factory=dict)  # the candidate's sampler
    device_b: dict[str, Any] = field(default_factory=dict)  # the candidate side's card
    # the set-up ``info`` of the first pair's sides (paired_suite: their correctness)
    info_a: dict[str, Any] = field(default_factory=dict)
    info_b: dict[str, Any] = field(default_factory=dict)
    # every block's SM clock (None: not read) and unreliable throttle reasons, in order
    block_clocks: list[int | None] = field(default_factory=list)
    block_reasons: list[list[str]] = field(default_factory=list)
    # telemetry.blocks_reliable over the blocks: one throttled block, no regression
    reliable: bool = True
    throttled_blocks: int = 0
    # samples of the timed blocks whose host queued the call after the start event
    # fired (``timing.HostGuard``): taken again, or kept at the spin's cap
    host_late_retaken: int = 0
    host_late_kept: int = 0
    host_late_groups: int = 0  # groups left out of the verdict (``on_time_groups``)
    # each side's host time to queue one call, the median over its timed blocks
    # (``timing.Sampler.launches_since``), one per pair that timed; empty off-GPU
    launch_a: list[float] = field(default_factory=list)
    launch_b: list[float] = field(default_factory=list)

    @property
    def host_launch_a(self) -> float | None:
        """Role A's launch: the median of its sides' (``launch.role_launch_s``)."""
        return role_launch_s(self.launch_a)

    @property
    def host_launch_b(self) -> float | None:
        return role_launch_s(self.launch_b)

    late_groups: list[bool] = field(default_factory=list)  # per group: a block kept one
    # where the time went (seconds): setup_s (wall until every side was set up),
    # setup_side_s / check_s (the slowest side's set-up and correctness check, and
    # that check's parts: runner.CHECK_PARTS),
    # screen_s (warm-up blocks and set-ups again), blocks_s (the timed groups)
    costs: dict[str, float] = field(default_factory=dict)
    # the screen: every side's deviation from its role's median per round, the sides
    # set up again, the pairs left out and the sides the pool should replace
    screen: list[dict[str, Any]] = field(default_factory=list)
    resetups: int = 0
    respawns: int = 0  # of the set-ups again, those in a new process (``respawn``)
    excluded_pairs: list[int] = field(default_factory=list)
    sick: list[str] = field(default_factory=list)
    # a side off in a screen round that was not off in the round before: the time moves
    # within processes, so new set-ups will not steady it (``_Screen.drifted``)
    screen_drifted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(
    log_ratios: Sequence[float], cfg: PairedConfig, clusters: Sequence[int] | None = None
) -> tuple[float, float, float, CaseVerdict]:
    """Ratio, interval and verdict from the groups' log-ratios (the rule: ``kernels/verdict.py``).

    ``clusters`` (the placement of each group): groups that share a placement are
    not independent, so they are averaged first and the interval is taken over
    the placements.
    """
    if clusters is not None and len(set(clusters)) < len(log_ratios):
        log_ratios = [sum(v) / len(v) for v in _by_cluster(log_ratios, clusters)]
    n = len(log_ratios)
    mean = sum(log_ratios) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in log_ratios) / (n - 1)) if n > 1 else math.inf
    half = stats.t_quantile(cfg.confidence, n - 1) * sd / math.sqrt(n) if n > 1 else math.inf
    ratio, lo, hi = _exp(mean), _exp(mean - half), _exp(mean + half)
    return ratio, lo, hi, decide(ratio, lo, hi, cfg.min_effect).verdict


def a_goes_first(round_: int, slot: int) -> bool:
    """Whether a group runs ABBA (else BAAB): in turn over a pair's rounds and over the
    pairs (``slot``) of a round.

    The side that goes second runs two blocks back to back, which on a 2-core CPU read
    it 10-12 % faster (docs/measurement.md §35c). Alternated over rounds only, every
    pair of an odd round count carried the same tilt, which an interval over pairs
    cannot see: three pairs read 0.90 [0.87, 0.94] for identical work. Alternated over
    the pairs too, the tilt cancels across pairs or widens the interval; it never
    shifts it alone.
    """
    return (round_ + slot) % 2 == 0


def _by_cluster(log_ratios: Sequence[float], clusters: Sequence[int]) -> list[list[float]]:
    """The groups' log-ratios of each cluster, clusters in order of first appearance."""
    by: dict[int, list[float]] = {}
    for c, x in zip(clusters, log_ratios, strict=True):
        by.setdefault(c, []).append(x)
    return list(by.values())


def narrowing_left(log_ratios: Sequence[float], clusters: Sequence[int], rounds: int) -> float:
    """How wide the interval would be at ``rounds`` groups a cluster, as a share of its
    width now (1: more rounds would not narrow it; 0: not known, keep measuring).

    The one-way random-effects split of the groups' log-ratios: within a cluster (a
    process pair) the groups scatter by the blocks' noise, which more rounds average
    away; the clusters' means scatter by that noise over the rounds they had plus each
    pair's own offset, which no round removes. ``judge`` takes the interval over the
    cluster means, so its width at ``rounds`` rounds goes with
    ``sqrt(between + within / rounds)``. Needs 3 clusters of 2 groups or more.
    """
    groups = _by_cluster(log_ratios, clusters)
    if len(groups) < 3 or min(len(g) for g in groups) < 2:
        return 0.0
    means = [sum(g) / len(g) for g in groups]
    mean = sum(means) / len(means)
    spread = sum((mu - mean) ** 2 for mu in means) / (len(means) - 1)
    dof = sum(len(g) - 1 for g in groups)
    within = sum((x - mu) ** 2 for g, mu in zip(groups, means, strict=True) for x in g) / dof
    if spread <= 0:
        return 1.0
    now = len(log_ratios) / len(groups)
    between = max(0.0, spread - within / now)
    return min(1.0, math.sqrt((between + within / max(now, rounds)) / spread))


# above this share of late groups, the host is part of the case (``on_time_groups``)
HOST_LATE_SHARE = 0.25


def groups_left_out(late: Sequence[bool]) -> int:
    """How many groups ``on_time_groups`` leaves out of the verdict (the one rule)."""
    n = sum(late)
    return n if n <= HOST_LATE_SHARE * len(late) else 0


def on_time_groups(
    log_ratios: Sequence[float], clusters: Sequence[int] | None, late: Sequence[bool]
) -> tuple[list[float], list[int] | None]:
    """The groups to judge: those whose blocks kept no sample the host queued late.

    A sample kept late (``timing.HostGuard`` at its cap) holds host time, in whichever
    side's block it fell; on the H200 (2026-12-04, §17) SDPA's varlen prefill kept 37
    such samples in one case and its first attempt read [0.56, 1.39] while the next two
    read within ±0.5 %. Whether a sample comes late is set by the host's launch against
    the spin queued before the start event (at the cap, 20 ms), not by the timed
    kernel's own time, so leaving such a group out (all four blocks, both roles) biases
    neither side. Where such groups are more than ``HOST_LATE_SHARE`` of all, the host
    is in the case's samples throughout (a call that synchronises), alike for both
    roles, and every group counts.
    """
    if not groups_left_out(late):
        return list(log_ratios), None if clusters is None else list(clusters)
    keep = [i for i, was_late in enumerate(late) if not was_late]
    return [log_ratios[i] for i in keep], None if clusters is None else [clusters[i] for i in keep]


def _exp(x: float) -> float:
    """``math.exp``, infinite past its range instead of raising: two process pairs at a
    level of 1 - 1e-8 give t = 6e7, and such an interval is only wide, not an error
    (the bench-paired command crashed on it, 2026-12-04)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def judge_reliable(
    log_ratios: Sequence[float],
    cfg: PairedConfig,
    clusters: Sequence[int] | None = None,
    reliable: bool = True,
) -> tuple[float, float, float, CaseVerdict]:
    """``judge``, with the throttle guard: an unreliable measurement decides no change.

    The verdict is ``verdict.decide``'s with ``reliable`` passed on, so a throttled
    comparison is at worst inconclusive (and measured again), never a regression.
    """
    ratio, lo, hi, verdict = judge(log_ratios, cfg, clusters)
    if not reliable:
        verdict = decide(ratio, lo, hi, cfg.min_effect, reliable=False).verdict
    return ratio, lo, hi, verdict


def compare(
    a: Side | Sequence[Side],
    b: Side | Sequence[Side],
    factory: str,
    params_a: dict[str, Any],
    params_b: dict[str, Any],
    cfg: PairedConfig | None = None,
    timer: dict[str, Any] | None = None,
    first_pair: dict[str, Any] | None = None,
    respawn: Callable[[Sequence[Side]], list[Side]] | None = None,
    cures: CureLedger | None = None,
    warm: Callable[[dict[str, dict[str, Any]]], None] | None = None,
    settle: Callable[[float | None], None] | None = None,
) -> PairedResult:
    """Set both sides up with the case, screen them, then alternate blocks until a verdict.

    ``first_pair``: parameters merged into the first pair's set-up only (paired_suite:
    ``check=True``, so each role's result is checked once, not once per process).
    The first pair's set-up ``info`` comes back as ``info_a``/``info_b``.

    ``respawn``: the pool's way to replace sides' processes (``paired_suite._Sides``),
    started together; the screen uses it for sides that a set-up again in the same
    process did not cure, while ``cures`` (the pool's ``CureLedger``, kept across its
    comparisons) says new processes cure here. ``warm`` and ``settle``: the pool's spares
    set the case up beside each set-up this comparison waits for (``warm`` sends, before
    the sides' own set-ups; ``settle`` reads, after them), so that a later replacement
    sets up warm (``paired_suite._Sides.warm``); nothing is timed while they run.

    Every block's SM clock and throttle reasons are kept; one throttled block makes
    the comparison unreliable (``telemetry.blocks_reliable``), and an unreliable
    comparison is never a regression or an improvement (``verdict.decide``).

    ``a`` and ``b`` may be lists of equal length m: m independent process pairs.
    A process carries a fixed offset of its own (on the H200 up to 0.5 %, which
    flips sign when the two processes swap roles, docs/measurement.md run 8) that
    no number of groups inside one pair averages away. With m pairs, group g runs
    on the next pair in turn and the interval is taken over the pairs, so process
    offsets widen the interval instead of biasing the ratio.

    **The screen** (m >= 3: ``_Screen``): every pair warms up with one unrecorded group;
    a side whose level is more than ``screen_tol`` slower than its role's reference
    level (the lower quartile, or the fastest side where the other role confirms that
    level), and than its pair partner or with its partner slow too, is set up again (new
    memory for its inputs, a new graph; from the second time on in a new process, with
    ``respawn``, while the pool's ``cures`` say new processes cure), up to
    ``screen_retries`` times, and then left out with its pair (its name goes to
    ``sick``: the pool replaces the process). On the H200 a fresh process sometimes runs
    a short kernel 1.1-1.35x slow for its whole life (docs/measurement.md §5, §6, §10);
    averaged in, such a state makes the interval several percent wide. The screen
    compares a side only with sides of its own role, so it cannot see, and cannot
    remove, a difference between baseline and candidate: a true regression moves every
    candidate side alike.

    **Unsteady**: if more than half the pairs are still off after the last round, the
    sides' levels disagree far beyond what the interval's model of a pair offset
    allows, and no group is timed: the comparison is ``inconclusive`` with stop
    reason ``unsteady``. On the H200 (2026-12-03) SDPA's varlen MHA prefill on nested
    tensors kept 8-12 of 16 fresh sides +7-80 % off through every round, and the
    blocks of all 8 pairs read an A/A "improvement" at 0.88 [0.80, 0.98].
    """
    cfg = cfg or PairedConfig()
    timer = {**cfg.timer, **(timer or {})}
    sides_a = [a] if isinstance(a, Side) else list(a)
    sides_b = [b] if isinstance(b, Side) else list(b)
    if not sides_a:
        raise ValueError("compare needs at least one side per role")
    if len(sides_a) != len(sides_b):
        raise ValueError("compare needs as many baseline sides as candidate sides")
    m = len(sides_a)
    k = max(1, cfg.placements)
    setup = {"cmd": "setup", "factory": factory, "timer": timer, "placements": k}
    costs: dict[str, float] = {}
    began = time.perf_counter()
    # All sides set up at once (an import of torch and a warm-up each), unless the
    # config asks for one at a time; the candidates' replies are read first: a broken
    # candidate is the answer, whatever the baseline.
    extra = first_pair or {}
    asks = [
        {**setup, "params": {**params, **(extra if i == 0 else {})}}
        for sides, params in ((sides_b, params_b), (sides_a, params_a))
        for i in range(len(sides))
    ]
    spare_asks = {"A": {**setup, "params": params_a}, "B": {**setup, "params": params_b}}
    if warm is not None:
        warm(spare_asks)
    db, da = _set_up(sides_b, sides_a, asks, cfg)
    if settle is not None:
        settle(cfg.ask_timeout_s)
    costs["setup_s"] = time.perf_counter() - began
    log.info("set up %d sides in %.1f s", 2 * m, costs["setup_s"])
    if cfg.screen_delay_s > 0:
        log.info("waiting %.1f s before the screen (screen_delay_s)", cfg.screen_delay_s)
        time.sleep(cfg.screen_delay_s)
        costs["setup_s"] += cfg.screen_delay_s
    costs["setup_side_s"] = max(float(d.get("setup_s", 0.0)) for d in da + db)
    # the longest warm-up (the timer's, until the clock is steady: up to max_warmup_s
    # while every side of the pool warms up on the one GPU at once)
    costs["setup_warmup_s"] = max(float(d.get("warmup_s") or 0.0) for d in da + db)
    checker = max(da + db, key=lambda d: float((d.get("info") or {}).get("check_s", 0.0)))
    costs["check_s"] = float((checker.get("info") or {}).get("check_s", 0.0))
    # the slowest check's parts (runner.CHECK_PARTS), where its side reported them
    for part, spent in ((checker.get("info") or {}).get("check_parts") or {}).items():
        costs[str(part)] = float(spent)
    k = min(int(d.get("placements", k)) for d in da + db)
    per_sample = max(max(d["sample_s"] for d in da + db), 1e-7)
    samples = max(3, min(2000, int(cfg.block_s / per_sample)))
    began = time.perf_counter()
    screen = _Screen(sides_a, sides_b, samples, cfg, cures)

    def again(batch: list[tuple[str, int, bool]]) -> None:
        """Set a round's off sides up again together, those tried before in new
        processes started together: a round waits for one start-up and one set-up, not
        one per side. (On the H200, 2026-12-03, a varlen prefill case replaced seven
        sides one after another, ~10 s each, and ran past its suite's limit.)"""
        roles = {"A": sides_a, "B": sides_b}
        renew = [(role, i) for role, i, new in batch if new]
        began = time.perf_counter()
        if renew and respawn is not None:
            fresh = respawn([roles[role][i] for role, i in renew])
            log.info("new processes for %s in %.1f s", [s.name for s in fresh],
                     time.perf_counter() - began)  # fmt: skip
            for (role, i), side in zip(renew, fresh, strict=True):
                roles[role][i] = side
            screen.respawns += len(renew)
        cands = [roles["B"][i] for role, i, _ in batch if role == "B"]
        bases = [roles["A"][i] for role, i, _ in batch if role == "A"]
        # a new placement too: the allocator (and a new process, the driver) would put
        # the inputs back into the memory the off set-up just freed
        asks = [{**setup, "params": params_b, "new_placement": True}] * len(cands)
        asks += [{**setup, "params": params_a, "new_placement": True}] * len(bases)
        if warm is not None and renew:  # the spares a round of new processes started
            warm(spare_asks)
        _set_up(cands, bases, asks, cfg)
        if settle is not None:
            settle(cfg.ask_timeout_s)
        log.info("set %d sides up again in %.1f s", len(batch), time.perf_counter() - began)

    screen.run(again)
    costs["screen_s"] = time.perf_counter() - began
    active = [i for i in range(m) if i not in screen.excluded]
    n_active = len(active)
    t0 = time.perf_counter()
    logs: list[float] = []
    a_meds: list[float] = []
    b_meds: list[float] = []
    block_clocks: list[int | None] = []
    block_reasons: list[list[str]] = []
    host_late = [0, 0]  # retaken, kept late
    # each side's per-block host launch medians, by pair: (role A's, role B's)
    launches: dict[int, tuple[list[float], list[float]]] = {}
    late_groups: list[bool] = []
    reliability = blocks_reliable([])
    stop = "groups_max"
    verdict, ratio, lo, hi = CaseVerdict.INCONCLUSIVE, math.nan, math.nan, math.nan
    # every active pair gets the same number of groups before each judgement
    target = first_target = _round_up(max(cfg.groups_min, n_active), n_active)
    step = _round_up(cfg.groups_step, n_active)
    placement: list[int] = []
    pair_of: list[int] = []
    if screen.unsteady:
        stop = UNSTEADY
    while stop != UNSTEADY and len(logs) < cfg.groups_max:
        g = len(logs)
        pair, rnd = active[g % n_active], g // n_active
        pa, pb = sides_a[pair], sides_b[pair]
        first, second = (pa, pb) if a_goes_first(rnd, g % n_active) else (pb, pa)
        ask = {"cmd": "block", "samples": samples, "placement": rnd % k}
        placement.append(rnd % k)
        pair_of.append(pair)
        r1 = first.ask(ask, cfg.ask_timeout_s)
        r2 = second.ask(ask, cfg.ask_timeout_s)
        r3 = second.ask(ask, cfg.ask_timeout_s)
        r4 = first.ask(ask, cfg.ask_timeout_s)
        ra1, rb1, rb2, ra2 = (r1, r2, r3, r4) if first is pa else (r2, r1, r4, r3)
        a1, a2 = stats.median(ra1["values"]), stats.median(ra2["values"])
        b1, b2 = stats.median(rb1["values"]), stats.median(rb2["values"])
        logs.append(math.log((b1 + b2) / (a1 + a2)))
        a_meds += [a1, a2]
        b_meds += [b1, b2]
        late_groups.append(False)
        side_launches = launches.setdefault(pair, ([], []))
        for r, role in ((ra1, 0), (rb1, 1), (rb2, 1), (ra2, 0)):
            if r.get("host_launch_s") is not None:
                side_launches[role].append(float(r["host_launch_s"]))
            block_clocks.append(r.get("clock"))
            block_reasons.append(list(r.get("reasons") or []))
            retaken, kept = r.get("host_late") or (0, 0)
            host_late[0] += int(retaken)
            host_late[1] += int(kept)
            late_groups[-1] = late_groups[-1] or int(kept) > 0
        reliability = blocks_reliable(block_clocks, block_reasons)
        clusters = _clusters(pair_of, placement, m, k)
        if len(logs) >= target:
            judged, by = on_time_groups(logs, clusters, late_groups)
            ratio, lo, hi, verdict = judge_reliable(judged, cfg, by, reliability.reliable)
            log.info("%d groups: %.4f [%.4f, %.4f] %s", len(logs), ratio, lo, hi, verdict.value)
            if verdict != CaseVerdict.INCONCLUSIVE:
                stop = "decided"
                break
            # the pairs' offsets, not the groups' noise, set the width: new set-ups will
            # narrow it, more rounds on these will not
            if (
                cfg.setup_bound > 0
                and by is not None
                and len(logs) >= 2 * n_active
                and narrowing_left(judged, by, cfg.rounds_max) > 1 - cfg.setup_bound
            ):
                stop = SETUP_BOUND
                break
            target += step
        spent = time.perf_counter() - t0 >= cfg.budget_s
        # with pairs as the unit, more rounds stop paying: a re-measure's new set-ups do
        rounded = m > 1 and len(logs) >= max(cfg.rounds_max * n_active, first_target)
        if (spent or rounded) and len(logs) >= 2 * n_active:
            stop = "budget" if spent else ROUNDS_MAX
            judged, by = on_time_groups(logs, clusters, late_groups)
            ratio, lo, hi, verdict = judge_reliable(judged, cfg, by, reliability.reliable)
            break
    costs["blocks_s"] = time.perf_counter() - t0
    left_out = groups_left_out(late_groups)
    late_note = f" ({left_out} groups left out: samples the host queued late)" if left_out else ""
    log.info("stop (%s) after %d groups in %.1f s: %.4f [%.4f, %.4f] %s%s", stop, len(logs),
             costs["blocks_s"], ratio, lo, hi, verdict.value, late_note)  # fmt: skip
    return PairedResult(
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        groups=len(logs),
        verdict=verdict,
        stop_reason=stop,
        seconds=costs["blocks_s"],
        a_median=stats.median(a_meds) if a_meds else math.nan,
        b_median=stats.median(b_meds) if b_meds else math.nan,
        group_ratios=[math.exp(x) for x in logs],
        placements=placement if k > 1 else [0] * len(logs),
        pairs=pair_of,
        clusters=_clusters(pair_of, placement, m, k),
        clocks=[c for c in block_clocks if c],
        a_blocks=a_meds,
        b_blocks=b_meds,
        describe_b={k: v for k, v in db[0].items() if k not in ("ok", "info", "device")},
        device_b=dict(db[0].get("device") or {}),
        info_a=dict(da[0].get("info") or {}),
        info_b=dict(db[0].get("info") or {}),
        block_clocks=block_clocks,
        block_reasons=block_reasons,
        reliable=reliability.reliable,
        throttled_blocks=len(reliability.throttled),
        host_late_retaken=host_late[0],
        host_late_kept=host_late[1],
        host_late_groups=left_out,
        late_groups=late_groups,
        launch_a=[stats.median(a) for a, _ in launches.values() if a],
        launch_b=[stats.median(b) for _, b in launches.values() if b],
        costs=costs,
        screen=screen.rows,
        resetups=screen.resetups,
        respawns=screen.respawns,
        excluded_pairs=sorted(screen.excluded),
        sick=screen.sick,
        screen_drifted=screen.drifted,
    )


@dataclass
class CureLedger:
    """How often each way of setting an off side up again cured it, over a pool's life.

    On the H200 (2026-12-04, docs/measurement.md §17) the two ways swapped ranks from
    card to card on FlashInfer decode's slow sides: on one card a new process cured most
    of them and a set-up again in place few; on another a set-up again in place (a new
    placement, 0.2 s) cured about 40 %, and new processes (6-10 s a round) about one in
    ten, so most trials paid for respawns that left their pairs out anyway. The screen
    asks for a new process only while new processes are worth it here (``respawn_pays``).
    """

    MIN_TRIES = 6  # new processes tried before their record counts
    FUTILE = 0.25  # a smaller share cured: set up again in place instead

    tried: dict[str, int] = field(default_factory=lambda: {"in_place": 0, "new_process": 0})
    cured: dict[str, int] = field(default_factory=lambda: {"in_place": 0, "new_process": 0})

    def note(self, how: str, cured: bool) -> None:
        self.tried[how] += 1
        self.cured[how] += int(cured)

    def respawn_pays(self) -> bool:
        n = self.tried["new_process"]
        return n < self.MIN_TRIES or self.cured["new_process"] >= self.FUTILE * n


def screen_runs(cfg: PairedConfig, pairs: int) -> bool:
    """Whether a comparison of ``pairs`` pairs screens its sides (``_Screen``): a
    tolerance set, and 3 pairs to tell an off side from its role's level."""
    return cfg.screen_tol > 0 and pairs >= 3


class _Screen:
    """The warm-up of every pair, and the screen of ``compare`` over the sides' levels.

    Every pair first runs one unrecorded group A B B A (the side set up last has
    just warmed up); a second pass gives every side its level (the median of its two
    blocks). A fresh process's first set-up sometimes runs a short kernel 1.1-1.35x
    slow (a 12 us GEMM, FlashInfer decode at 19-42 us, Liger's LayerNorm at 79 us;
    H200, docs/measurement.md §5, §6, §10). A side is off when its level is more than
    ``screen_tol`` slower than its role's reference (``reference``: the state only slows
    a side down, and more than half of a fresh pool's sides can be in it, 7 of 8 once),
    and either slower
    than its own pair partner too, or with its partner slow as well:

    - the two sides of a pair run their blocks interleaved, so a drift of the clock
      after 16 set-ups (up to 10 % pair after pair on 0.2-1.5 ms kernels, §6) moves
      both alike; it is set up again and re-levelled like a state, and passes the
      re-level once the clock has settled;
    - two sides in the state are not alike: the state's levels spread from +19 to
      +31 % (§10), so a pair of two slow sides carries an error of several per cent,
      and such pairs set the FlashInfer decode confirmations of §10 at 0.97
      [0.93, 1.02].

    An off side is set up again and re-levelled, up to ``screen_retries`` times; from
    the second time on in a new process, where ``compare`` has a ``respawn`` and the
    ``CureLedger`` says new processes cure here: on decode a new set-up in the same
    process cured 19 of 64 slow sides (§10); with a new placement 31-45 %, and new
    processes 85 % on one card and 4 % on another (§17b). A side whose process was found
    off in an earlier comparison of its pool (``Side.found_off``) relapsed: its first try
    is a new process already, under the same ledger. Only sides of the same role
    are compared with each other, and a partner only to tell a lone side from a pair, so
    the screen cannot remove a difference between baseline and candidate: a true
    regression moves every candidate side alike.
    """

    def __init__(
        self,
        sides_a: list[Side],
        sides_b: list[Side],
        samples: int,
        cfg: PairedConfig,
        cures: CureLedger | None = None,
    ) -> None:
        self.sides = {"A": sides_a, "B": sides_b}
        self.cures = cures or CureLedger()
        # half blocks: a warm-up and a level good to ~1 % need no more, and every
        # second here is a second of each case
        self.samples, self.cfg = max(3, samples // 2), cfg
        self.level: dict[str, list[float]] = {"A": [], "B": []}
        self.rows: list[dict[str, Any]] = []
        self.resetups = 0
        self.respawns = 0
        self.tries: dict[tuple[str, int], int] = {}
        self.excluded: set[int] = set()
        self.sick: list[str] = []
        self.unsteady = False  # more than half the pairs off after the last round
        # a side that was not off in one round is off in the next: on the H200
        # (2026-12-03) SDPA's varlen MHA prefill went A1 A2 A5 A6 off, then A0 A6 A7, in
        # each of 3 attempts (67.7 GPU-s); a GQA decode burst only shrank (11, 9, 6 off)
        self.drifted = False
        # the sides found off in an earlier comparison (the pool's sides live across
        # attempts and cases): their set-up again in place did not hold
        self.relapsing = {
            (role, i)
            for role, sides in self.sides.items()
            for i, side in enumerate(sides)
            if side.found_off > 0
        }

    def _warm(self, i: int) -> tuple[float, float]:
        """One unrecorded group A B B A on pair i; each side's median block."""
        pa, pb = self.sides["A"][i], self.sides["B"][i]
        got = [
            stats.median(side.ask({"cmd": "block", "samples": self.samples},
                                  self.cfg.ask_timeout_s)["values"])
            for side in (pa, pb, pb, pa)
        ]  # fmt: skip
        return stats.median([got[0], got[3]]), stats.median([got[1], got[2]])

    def reference(self, role: str) -> float:
        """The level a role's healthy sides run at: its lower quartile, or its fastest
        side where the other role's fastest side runs at that level too.

        The quartile alone misses a role with all sides but one in the state: on the
        H200 (2026-12-04, §17) a fresh decode pool had 7 of 8 candidate sides +25 %
        slow; the quartile was a slow side, none was off, and the comparison read
        1.24 [1.09, 1.41] for a 1 % injection. The lone healthy side is believed only
        when the other role's fastest side agrees with it (within ``screen_tol``): a
        true regression moves every candidate side, so the candidate's fastest side is
        slow too and the quartile stays the reference; a lone fast glitch has no
        partner level in the other role.
        """
        levels = sorted(self.level[role])
        quartile = levels[(len(levels) - 1) // 4]
        other = min(self.level["B" if role == "A" else "A"])
        if levels[0] > 0 and other > 0 and abs(levels[0] / other - 1) <= self.cfg.screen_tol:
            return levels[0]
        return quartile

    def deviations(self) -> dict[tuple[str, int], float]:
        """Each side's level over its role's reference (``reference``), minus 1 (> 0:
        slower)."""
        out: dict[tuple[str, int], float] = {}
        for role, levels in self.level.items():
            ref = self.reference(role)
            for i, x in enumerate(levels):
                out[(role, i)] = x / ref - 1 if ref > 0 else 0.0
        return out

    def off(self, dev: dict[tuple[str, int], float]) -> list[tuple[str, int]]:
        """Sides slower than the reference by ``screen_tol``, and than their partner by as
        much or with the partner slow too."""
        tol = self.cfg.screen_tol
        other = {"A": "B", "B": "A"}
        return [
            (role, i)
            for (role, i), d in dev.items()
            if d > tol and (d - dev[(other[role], i)] > tol or dev[(other[role], i)] > tol)
        ]

    def run(self, again: Callable[[list[tuple[str, int, bool]]], None]) -> None:
        """Warm every pair; level every side, set off sides up again, re-level.

        ``again([(role, i, in_new_process), ...])``: set a round's off sides up again;
        the flag asks for a new process (the side was set up again before and is still
        off).
        """
        m = len(self.sides["A"])
        for i in range(m):
            self._warm(i)
        if not screen_runs(self.cfg, m):
            return
        for i in range(m):
            la, lb = self._warm(i)
            self.level["A"].append(la)
            self.level["B"].append(lb)
        before: set[tuple[str, int]] | None = None
        how: dict[tuple[str, int], str] = {}  # the sides set up again last round, and how
        for rnd in range(self.cfg.screen_retries + 1):
            dev = self.deviations()
            off = self.off(dev)
            for side, way in how.items():
                self.cures.note(way, side not in off)
            if before is not None and set(off) - before:
                self.drifted = True
            before = set(off)
            self.rows += [
                {"round": rnd, "side": self.sides[role][i].name, "deviation": round(d, 5),
                 "off": (role, i) in off}
                for (role, i), d in sorted(dev.items())
            ]  # fmt: skip
            log.info(
                "screen round %d: %d of %d sides off %s", rnd, len(off), 2 * m,
                [f"{self.sides[role][i].name} {dev[(role, i)]:+.1%}" for role, i in off],
            )  # fmt: skip
            if not off:
                return
            if rnd == self.cfg.screen_retries:
                pairs = {i for _, i in off}
                if m - len(pairs) >= max(2, (m + 1) // 2):
                    self.excluded = pairs
                    self.sick = [self.sides[role][i].name for role, i in off]
                else:
                    self.unsteady = True
                return
            for role, i in off:
                if (role, i) not in self.tries:  # once per comparison and side
                    proc = self.sides[role][i]
                    proc.found_off += 1
            renew = self.cures.respawn_pays()
            if not renew and any(self.tries.get(side, 0) for side in off):
                log.info("new processes cured %d of %d here (in place %d of %d): set up again "
                         "in place", self.cures.cured["new_process"],
                         self.cures.tried["new_process"], self.cures.cured["in_place"],
                         self.cures.tried["in_place"])  # fmt: skip
            # a new process from the second try on, or at once for a side whose process
            # was off in an earlier comparison too: on the H200 (2026-12-04, §18) SDPA's
            # varlen MHA prefill found one candidate side +169-251 % off in each of four
            # attempts; each set-up again in place passed the re-level, and the blocks
            # spread 0.54-1.27 until the fourth attempt gave it a new process
            batch = [
                (role, i, renew and (self.tries.get((role, i), 0) > 0
                                     or (role, i) in self.relapsing))
                for role, i in off
            ]  # fmt: skip
            how = {(role, i): "new_process" if new else "in_place" for role, i, new in batch}
            again(batch)
            for role, i in off:
                self.tries[(role, i)] = self.tries.get((role, i), 0) + 1
                self.resetups += 1
            for i in sorted({i for _, i in off}):
                self._warm(i)  # the side set up again warms up first
                self.level["A"][i], self.level["B"][i] = self._warm(i)


def _set_up(
    first: list[Side], then: list[Side], asks: list[dict[str, Any]], cfg: PairedConfig
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Set sides up (a case's first set-up, or again: new memory for the inputs, a new
    graph): all at once, or one after another where ``cfg.setup_one_at_a_time`` asks;
    every reply read, candidates' failures first (``_receive_all``)."""
    if not cfg.setup_one_at_a_time:
        for side, ask in zip(first + then, asks, strict=True):
            side.send(ask)
    return _receive_all(
        first, then, "setup", cfg.ask_timeout_s, asks if cfg.setup_one_at_a_time else None
    )


def _receive_all(
    first: list[Side],
    then: list[Side],
    cmd: str,
    timeout_s: float | None,
    one_at_a_time: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every side's reply, even when one failed (an unread reply would answer the next
    command); then the first failure, candidates' before baselines'.

    ``one_at_a_time``: a message per side, sent just before that side's reply is read,
    so no two sides work at once."""
    replies: list[dict[str, Any]] = []
    failures: list[Exception] = []
    for n, side in enumerate(first + then):
        began = time.perf_counter()
        try:
            if one_at_a_time is not None:
                side.send(one_at_a_time[n])
            replies.append(side.receive(cmd, timeout_s))
        except (SideError, SideDied, SideTimeout) as exc:
            failures.append(exc)
        if one_at_a_time is not None:
            # one by one, a stage's set-up is the sum of these: say where it stands
            # (LayerNorm's 16 on the H200 logged nothing for 320 s, §15d)
            log.info("%s %s in %.1f s", side.name, cmd, time.perf_counter() - began)
    if failures:
        raised = failures[0]
        if isinstance(raised, SideError):
            raised.also = [f for f in failures[1:] if isinstance(f, SideError)]
        raise raised
    return replies[: len(first)], replies[len(first) :]


def _round_up(n: int, m: int) -> int:
    return max(m, -(-n // m) * m)


def _clusters(pair_of: list[int], placement: list[int], m: int, k: int) -> list[int] | None:
    """The unit the interval is taken over: the process pair, else the placement."""
    if m > 1:
        return pair_of
    return placement if k > 1 else None


__all__ = [
    "CureLedger",
    "PairedConfig",
    "PairedResult",
    "ROUNDS_MAX",
    "SETUP_BOUND",
    "Side",
    "SideDied",
    "SideError",
    "SideTimeout",
    "UNSTEADY",
    "role_of",
    "screen_runs",
    "compare",
    "judge",
    "judge_reliable",
    "groups_left_out",
    "narrowing_left",
    "on_time_groups",
    "serve",
]

if __name__ == "__main__":
    serve()

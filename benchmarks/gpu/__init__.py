"""The GPU benchmark driver: every measurement the project has made on a GPU, rerunnable.

Run on the GPU host from the repository root (through the device tool: the
working tree is copied there, ``$OUT`` comes back; carry ``.whl`` for FlashInfer,
``.svc`` for the service, ``.src`` for FlashAttention-3 sources, ``.dsl`` for the
CuTe DSL)::

    python -m benchmarks.gpu prelude + gputests + paired --kernel "fp32 add 64M"

Sub-commands (``python -m benchmarks.gpu SUB --help`` for each):

====================  ============================================================
prelude               light install of kernelwatch, carried wheels, nvidia-smi
gputests              the ``@pytest.mark.gpu`` tests, JUnit XML and JSON
measure               timer CV: kernelwatch's timer against ``do_bench``
paired                paired trials: A/A and injected +x % work on named kernels
suite-aa              whole-suite A/A with ``bench-paired``: verdicts, wall s per case
inject                +x % work on real suite cases: the gate's power, both stages
host-gap              the timer's host guard off and on, idle and beside busy CPUs
reference-cost        the decode check's reference, one sequence at a time and batched
libraries             FlashInfer versions paired; FA3 built at commits, paired, benched
fleet                 per-GPU worker check: health, one run through Celery, stop
cutlass-dsl           CuTe DSL dense GEMM (carried .dsl/) against cuBLAS, kernel names
prepare-fa3           (networked machine) FA3 sources for an offline host, into .src/
prepare-cutlass-dsl   (networked machine) CUTLASS's CuTe DSL example + wheel, into .dsl/
liger                 Liger-Kernel commits through ``kernelwatch run`` (bundle in .src/)
prepare-liger         (networked machine) Liger-Kernel commits replayed into .src/
====================  ============================================================

Every sub-command writes ``$OUT/SUB.json`` (or ``--out DIR``) holding the machine,
its result and every step it ran, and prints a short table last; ``--deadline-s``
(seconds from the driver's start, 540 by default) bounds it so that a call never
overruns the device's 600 s; ``--cpu`` (``--dry-run``) runs it on the CPU with
tiny sizes, which is how ``tests/benchmarks/test_gpu_driver.py`` checks it.
What earlier runs produced is indexed in ``docs/data/README.md``.
"""

"""``python -m realparts``: build (or find in the cache) every real part, printing where each is.

Run by ``make test`` before the suite, so a first build's minutes are shown
apart from the tests' time. A part that cannot be built prints one line
naming what is missing and exits 2.
"""

from __future__ import annotations

import sys
import time

from realparts import caching, jobset, kafka, kube, kueue, strimzi, trainer, upstream


def main() -> int:
    for name, ensure in (("kubernetes", kube.ensure_binaries), ("kafka", kafka.ensure_kafka),
                         ("strimzi's CRDs", strimzi.ensure_crd_directory),
                         (f"kubeflow's training-operator {upstream.VERSION}", upstream.ensure_binary),
                         (f"kubeflow's trainer {trainer.VERSION} (manifests and examples)", trainer.ensure_module),
                         (f"the JobSet controller {jobset.VERSION}", jobset.ensure_build),
                         (f"Kueue {kueue.VERSION}", kueue.ensure_build)):
        started = time.monotonic()
        try:
            where = ensure()
        except caching.PartError as exc:
            print(f"realparts: error: {name}: {exc}", file=sys.stderr)
            return 2
        print(f"realparts: {name} ready in {where} ({time.monotonic() - started:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Ray Core in one script: a task, an actor and an object.

Run it with `python examples/ray_core_tour.py`. The page "What Ray is"
(docs/ray-core/index.md) walks through the same program; tests/test_examples.py
runs this file and checks what it prints.
"""

import numpy as np
import ray


@ray.remote
def square(x):
    """A task: a stateless function run in a worker process."""
    return x * x


@ray.remote
class Counter:
    """An actor: state that lives in its own process; calls run in order."""

    def __init__(self):
        self.value = 0

    def incr(self, amount):
        self.value += amount

    def get(self):
        return self.value


@ray.remote
def total(matrix):
    return float(np.sum(matrix))


def main() -> None:
    ray.init(num_cpus=2)
    try:
        print("squares:", ray.get([square.remote(i) for i in range(4)]))

        counter = Counter.remote()
        for _ in range(10):
            counter.incr.remote(1)  # not awaited: ordering makes the total exact
        print("counter:", ray.get(counter.get.remote()))

        matrix_ref = ray.put(np.ones((1000, 1000)))  # stored once, read zero-copy
        print("sum:", ray.get(total.remote(matrix_ref)))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

"""`Pauses`: the step hook tests inject into a conversion to stop it at a chosen point.

`Pauses.parse("chunk=0.3,shard=1,manifest=60")` sleeps that many seconds before preparing
each chunk, after completing each shard, and between writing the manifest's temporary
file and renaming it (the points of `prep.core.run.checkpoints.StepHook`), so that a test
can kill the conversion there. Picklable: Beam ships it inside the DoFns.
"""

from __future__ import annotations

import dataclasses
import time


@dataclasses.dataclass(frozen=True)
class Pauses:
    seconds: tuple[tuple[str, float], ...]

    @classmethod
    def parse(cls, spec: str) -> Pauses:
        items = []
        for item in filter(None, spec.split(",")):
            name, _, seconds = item.partition("=")
            items.append((name.strip(), float(seconds)))
        return cls(tuple(items))

    def __call__(self, point: str) -> None:
        for name, seconds in self.seconds:
            if name == point:
                time.sleep(seconds)

"""A testing aid: the coordinator dies abruptly at a named phase boundary of a step.

`SWARMHUB_FAULT_POINT=POINT@STEP` (averaged, recorded, applying, opened) makes `FaultPoint.reached`
exit the process without cleanup, as SIGKILL would, so tests can prove that a restart at that exact
point loses no committed step. Unset, it does nothing.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

FAULT_EXIT_CODE = 70


class FaultPoint:
    def __init__(self, setting: str) -> None:
        point, _, step = setting.partition("@")
        self._at = (point, int(step)) if setting else None

    def reached(self, point: str, step: int) -> None:
        if self._at == (point, step):
            log.error("fault point %s@%d reached: exiting", point, step)
            os._exit(FAULT_EXIT_CODE)

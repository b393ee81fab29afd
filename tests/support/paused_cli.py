"""`python -m tests.support.paused_cli ARGS...`: the `prep` command line with `Pauses` injected.

The pauses come from the environment variable PREP_TEST_PAUSE (e.g.
``chunk=0.3,shard=1,manifest=60``), read here, in test code: the kill tests run this
entry point in a subprocess instead of `prep`, and kill it at a pause.
"""

import os

from prep.cli import CliHooks, main
from tests.support.pauses import Pauses

if __name__ == "__main__":
    main(prog_name="prep", obj=CliHooks(on_step=Pauses.parse(os.environ.get("PREP_TEST_PAUSE", ""))))

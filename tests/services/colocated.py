"""What tests add to shared/launcher/colocated.py: this checkout on the drafter process's path, so that
test plugins (`tests.services....:Class`) load there too. For comparing a co-located plugin with the
same plugin in process:

    with colocated_drafter(model, "eagle", options, vocab_size, tmp_path, env=TEST_ENV) as co:
        engine = Engine(config, co.remote, model)
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_ENV = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}

"""The Makefile's header (what `make help` prints) lists every target."""

import os
import re

from support import REPO_ROOT


def test_help_lists_every_target():
    text = open(os.path.join(REPO_ROOT, "Makefile")).read()
    listed = re.findall(r"^#   make (\S+) ", text, re.M)
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    phony = {t for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for t in line.split()} - {"FORCE"}
    assert set(listed) == phony, f"in .PHONY, not in the header: {phony - set(listed)}; " \
                                 f"in the header, not in .PHONY: {set(listed) - phony}"
    defined = set(re.findall(r"^([\w-]+):(?!=)", text, re.M))
    assert phony <= defined, f"no rule for {phony - defined}"
    assert text.count("\nFORCE:\n") == 1

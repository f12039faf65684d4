"""The worked example of docs/environments.md ("Adding an environment") runs as written and gives
a working, registered, deterministic environment (in a subprocess: it registers a new name)."""

from __future__ import annotations

import re
import subprocess
import sys

CHECK = r'''
import random
from rlec.environments import ENVIRONMENTS
from rlec.grading import TASKS, grade
env = ENVIRONMENTS["gcd"]
assert TASKS["rlve/gcd"] == "env"
for d in (0, 3, env.max_difficulty):
    for seed in range(5):
        p = env.generate(seed, d)
        assert p == env.generate(seed, d)
        a, b = p.data["a"], p.data["b"]
        assert len(str(a)) == len(str(b)) == 2 + d, (d, a, b)
        assert env.verify("\\boxed{%s}" % p.answer, p).correct
        assert not env.verify("\\boxed{%d}" % (int(p.answer) + 1), p).correct
        assert grade("\\boxed{I don't know}", p.to_json(), "rlve/gcd").outcome.value == "abstain"
print("ok")
'''


def test_adding_an_environment_example_runs(repo_root):
    text = (repo_root / "docs" / "environments.md").read_text()
    section = text[text.index("## Adding an environment"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    result = subprocess.run([sys.executable, "-c", code + CHECK], cwd=repo_root, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]

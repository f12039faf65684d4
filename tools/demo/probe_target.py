"""Linear probe of the target p (and the operand digit count) from the hidden state at the answer-or-abstain choice.

    python tools/demo/probe_target.py outputs/demo/warm_start     # a built warm start (or rlec/demo/assets)

For each layer, a ridge regression on 450 prompts predicts p (uniform on 0.01 ... 0.90) and the
digit count from the last hidden state before the choice (after ``\\boxed{`` without restating,
right after the restated target with it), scored by R^2 on 150 more. This is how the demo found
that a 2-layer model carries the target weakly to the choice (R^2 0.37-0.48) and why its warm start
restates the target (tools/demo/FINDINGS.md).
"""

import random
import sys

import numpy as np
import torch

from rlec.demo import warm_start as ws
from rlec.models import load_tokenizer


def main(folder: str) -> None:
    model, enc, manifest = ws.load_compact(folder, load_tokenizer())
    cfg = manifest["config"]  # the response form of the last stage decides what precedes the choice
    restate = (cfg["finetune"][-1][3] if cfg.get("finetune") else cfg.get("restate_target", "none")) != "none"
    rng = random.Random(0)
    rows, ps, digits = [], [], []
    for _ in range(600):
        d, p = rng.choice([1, 2, 3]), rng.randint(1, 90) / 100
        problem = ws.addition_problem(rng, d)
        before = f"{p:.2f}" if restate else "\\boxed{"
        rows.append(enc.prompt(problem.question, p) + enc.response(before)[:-1])
        ps.append(p)
        digits.append(d)
    ids, mask = ws.pad_left(rows)
    with torch.no_grad():
        hidden = model.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for layer, h in enumerate(hidden):
        x = np.concatenate([h[:, -1].numpy(), np.ones((len(rows), 1))], 1)
        for name, y in (("p", np.array(ps)), ("digits", np.array(digits, float))):
            w = np.linalg.solve(x[:450].T @ x[:450] + 1e-2 * np.eye(x.shape[1]), x[:450].T @ y[:450])
            r2 = 1 - ((x[450:] @ w - y[450:]) ** 2).mean() / y[450:].var()
            print(f"layer {layer} {name} R^2 {r2:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])

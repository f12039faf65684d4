import sys, random, torch, numpy as np
from rlec.local import warm_start as ws
from rlec.models import load_tokenizer
def main(path):
    st = torch.load(path, weights_only=False)
    cfg = ws.WarmStartConfig(**st["config"]); tok = load_tokenizer(); enc = ws.Encoder(tok, st["vocab"])
    m = ws.build_compact_model(cfg, len(enc.vocab)); m.load_state_dict(st["model"]); m.eval()
    rng = random.Random(0)
    pre = enc.response("\\boxed{")[:-1]  # the three tokens before the decision
    X, P, D = [], [], []
    for _ in range(600):
        d = rng.choice([1, 2, 3]); p = rng.randint(1, 90) / 100
        pr = ws.addition_problem(rng, d)
        X.append(enc.prompt(pr.question, p) + pre); P.append(p); D.append(d)
    ids, mask = ws.pad_left(X)
    with torch.no_grad():
        hs = m.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for li, h in enumerate(hs):
        H = h[:, -1].numpy()
        H = np.concatenate([H, np.ones((len(H), 1))], 1)
        for name, y in (("p", np.array(P)), ("digits", np.array(D, float))):
            tr, te = slice(0, 450), slice(450, 600)
            w = np.linalg.solve(H[tr].T @ H[tr] + 1e-2 * np.eye(H.shape[1]), H[tr].T @ y[tr])
            pred = H[te] @ w; r2 = 1 - ((pred - y[te]) ** 2).mean() / y[te].var()
            print(f"layer {li} {name} R2 {r2:.3f}")
if __name__ == "__main__": main(sys.argv[1])

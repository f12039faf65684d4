"""Every environment: the verifier accepts the generator's answer and rejects perturbed ones,
difficulty grows the measured problem size, generation is deterministic and touches no global RNG,
and no response makes a verifier raise."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rlec.environments import ENVIRONMENTS, Problem, get_environment, parse_int, parse_int_list
from rlec.environments.base_conversion import to_base
from rlec.environments.counting import bounded_compositions
from rlec.environments.knights_knaves import solutions
from rlec.environments.linear_equations import determinant
from rlec.environments.maze import TEST_SIZES, TRAIN_SIZES, difficulty_of_size, shortest_path, size_of_difficulty
from rlec.environments.shortest_path import dijkstra

NAMES = sorted(ENVIRONMENTS)
SEEDS = range(6)


def difficulties(env):
    top = env.max_difficulty if env.max_difficulty is not None else 12
    return sorted({0, 1, 2, 5, top // 2, top})


def boxed(text: str) -> str:
    return f"Let me work it out.\n\nThe answer is \\boxed{{{text}}}."


def test_at_least_nine_built_in_environments_across_kinds():
    assert set(NAMES) >= {"addition", "arithmetic", "sorting", "maze", "linear_equations", "base_conversion", "counting",
                          "shortest_path", "knights_knaves"}


@pytest.mark.parametrize("name", NAMES)
def test_verifier_accepts_the_generators_answer(name):
    env = get_environment(name)
    for d in difficulties(env):
        for seed in SEEDS:
            problem = env.generate(seed, d)
            for response in (boxed(problem.answer), f"Reasoning...\nAnswer: {problem.answer}"):
                verdict = env.verify(response, problem)
                assert verdict.correct and verdict.score == 1.0, (name, d, seed, response[-80:], verdict)


def _perturb(name: str, problem: Problem, rng: random.Random) -> list[str]:
    """Wrong answers of the problem's own kind (every one must be rejected)."""
    data, answer = problem.data, problem.answer
    if name in ("addition", "arithmetic", "counting", "shortest_path"):
        value = int(answer)
        return [str(value + 1), str(value - 1), str(-value - 7), str(value * 10 + 3)]
    if name == "sorting":
        items = list(data["solution"])
        out = [", ".join(map(str, data["items"])) if data["items"] != items else None,  # unsorted input
               ", ".join(map(str, items[:-1])),  # one missing
               ", ".join(map(str, sorted(items, reverse=not data["descending"])))]  # wrong direction
        i = next((k for k in range(len(items) - 1) if items[k] != items[k + 1]), None)
        if i is not None:
            items[i], items[i + 1] = items[i + 1], items[i]
            out.append(", ".join(map(str, items)))
        return [o for o in out if o is not None and parse_int_list(o) != data["solution"]]
    if name == "maze":
        moves = answer
        flip = {"U": "D", "D": "U", "L": "R", "R": "L"}
        return [moves[:-1], moves + flip[moves[-1]], flip[moves[0]] + moves[1:], moves + "X"]
    if name == "linear_equations":
        values = list(data["solution"])
        k = rng.randrange(len(values))
        values[k] += 1
        return [", ".join(map(str, values)), ", ".join(map(str, data["solution"][:-1])) or "0.5"]
    if name == "base_conversion":
        digits = "0123456789ABCDEF"[: data["target_base"]]
        other = next(d for d in digits if d != answer[-1])
        return [answer[:-1] + other, answer + "0", to_base(int(data["value"]) + 1, data["target_base"]), data["written"]]
    if name == "knights_knaves":
        kinds = list(data["kinds"])
        kinds[rng.randrange(len(kinds))] ^= True
        by_name = ", ".join(f"{n}: {'knight' if k else 'knave'}" for n, k in zip(data["names"], kinds))
        return [by_name, ", ".join("knight" if k else "knave" for k in kinds),
                ", ".join("knave" if k else "knight" for k in data["kinds"])]
    if name == "pair_sum":
        a, b = (int(x) for x in answer.split(" + "))
        n, m = data["n"], data["m"]
        return [f"{a} + {b + 1}", str(n), f"{a}", f"{b + 1} + {a}"] + ([f"{m + 1} + {n - m - 1}"] if n > m else [])
    raise AssertionError(f"no perturbation for {name}")


@pytest.mark.parametrize("name", NAMES)
def test_verifier_rejects_perturbed_answers(name):
    env, rng = get_environment(name), random.Random(0)
    for d in difficulties(env):
        for seed in SEEDS:
            problem = env.generate(seed, d)
            for wrong in _perturb(name, problem, rng):
                verdict = env.verify(boxed(wrong), problem)
                assert not verdict.correct and verdict.score < 1.0, (name, d, seed, wrong, verdict)


def _maze_start(rows):
    return next((r, row.index("S")) for r, row in enumerate(rows) if "S" in row)


MEASURE = {
    "addition": lambda p: len(str(p.data["a"])) + len(str(p.data["b"])),
    "arithmetic": lambda p: len(str(p.data["a"])) + len(str(p.data["b"])),
    "sorting": lambda p: len(p.data["items"]),
    "maze": lambda p: len(p.data["rows"]) * len(p.data["rows"][0]),
    "linear_equations": lambda p: len(p.data["names"]),
    "base_conversion": lambda p: int(p.data["value"]).bit_length(),
    "counting": lambda p: len(p.data["bounds"]),
    "shortest_path": lambda p: p.data["n"],
    "knights_knaves": lambda p: len(p.data["names"]),
    "pair_sum": lambda p: p.data["m"],
}


@pytest.mark.parametrize("name", NAMES)
def test_difficulty_grows_the_measured_problem_size(name):
    env = get_environment(name)
    top = min(env.max_difficulty or 10, 10)
    sizes = [np.mean([MEASURE[name](env.generate(seed, d)) for seed in range(4)]) for d in range(top + 1)]
    assert all(a <= b for a, b in zip(sizes, sizes[1:])), (name, sizes)
    assert sizes[-1] > sizes[0] and sizes[4] > sizes[0], (name, sizes)


@pytest.mark.parametrize("name", NAMES)
def test_generation_is_deterministic_in_seed_and_difficulty(name):
    env = get_environment(name)
    assert env.generate(11, 3) == env.generate(11, 3)
    assert env.generate(11, 3).to_json() == type(env)().generate(11, 3).to_json()  # a fresh instance too
    assert len({env.generate(seed, 3).to_json() for seed in range(8)}) >= 6  # seeds matter
    assert env.generate(11, 3) != env.generate(11, 4)


def test_no_global_random_state_is_used_or_changed(monkeypatch):
    from rlec.environments import EnvironmentSource

    random.seed(123)
    np.random.seed(123)
    before_py, before_np = random.getstate(), np.random.get_state()

    def forbidden(*args, **kwargs):
        raise AssertionError("the global random module was used")

    for fn in ("random", "randint", "randrange", "choice", "choices", "sample", "shuffle", "getrandbits", "seed",
               "uniform", "gauss"):
        monkeypatch.setattr(random, fn, forbidden)
    for name in NAMES:
        env = get_environment(name)
        for d in (0, 3):
            problem = env.generate(5, d)
            env.verify(boxed(problem.answer), problem)
    source = EnvironmentSource({"samples_per_prompt": 1})
    rows = [source.next_row() for _ in range(40)]
    source.update({"environment": r["extra_info"]["environment"], "difficulty": r["extra_info"]["difficulty"],
                   "correct": 1} for r in rows)
    monkeypatch.undo()
    assert random.getstate() == before_py
    after_np = np.random.get_state()
    assert before_np[0] == after_np[0] and np.array_equal(before_np[1], after_np[1]) and before_np[2:] == after_np[2:]


def test_source_files_never_seed_global_generators(repo_root):
    for path in (repo_root / "rlec" / "environments").glob("*.py"):
        text = path.read_text()
        for banned in ("random.seed(", "np.random.", "numpy.random", "torch.manual_seed"):
            assert banned not in text, f"{path.name} uses {banned}"


HOSTILE = [None, "", 42, "\\boxed{", "\\boxed{" * 2000 + "1", "}" * 5000, "\\boxed{" + "9" * 50_000 + "}",
           "\\boxed{\u0000\u202e}", "<answer>" + "R" * 20_000 + "</answer>", "<think>no end", "\\boxed{1/0}",
           "\\boxed{x = }", "\\boxed{[1,,2]}", "\\boxed{-}", "\\boxed{knight knave knight knight knave}"]


@pytest.mark.parametrize("name", NAMES)
def test_verifier_never_raises_on_model_output(name):
    env = get_environment(name)
    problem = env.generate(2, 2)
    for response in HOSTILE:
        verdict = env.verify(response, problem)
        assert 0.0 <= verdict.score <= 1.0 and not (verdict.correct and verdict.score < 1)


@pytest.mark.parametrize("name", NAMES)
def test_i_dont_know_abstains(name):
    env = get_environment(name)
    problem = env.generate(2, 1)
    for response in ("\\boxed{I don't know}", "Hmm.\n\\boxed{\\text{I do not know}}"):
        verdict = env.verify(response, problem)
        assert verdict.abstained and verdict.score == 0.0 and not verdict.correct
    assert env.verify("no final answer here", problem).reason == "no_answer"


@pytest.mark.parametrize("name", NAMES)
def test_bad_generate_arguments_are_refused(name):
    env = get_environment(name)
    for seed, d in ((-1, 0), (0, -1), (True, 0), (0, 1.5)):
        with pytest.raises(ValueError):
            env.generate(seed, d)
    if env.max_difficulty is not None:
        with pytest.raises(ValueError, match="above its maximum"):
            env.generate(0, env.max_difficulty + 1)
    with pytest.raises(ValueError, match="cannot verify a problem of environment"):
        env.verify("x", Problem("other", 0, 0, "p", "a", {}))


def test_problem_json_round_trip_and_errors():
    problem = get_environment("maze").generate(4, 2)
    assert Problem.from_json(problem.to_json()) == problem
    for bad, message in (("{", "not valid JSON"), ("[1]", "JSON object"), ('{"environment": "maze"}', "'seed'")):
        with pytest.raises(ValueError, match=message):
            Problem.from_json(bad)


def test_every_max_difficulty_prompt_fits_the_cluster_prompt_length(qwen_tokenizer):
    from rlec.prompts import build_messages, render

    for name in NAMES:
        env = get_environment(name)
        assert env.max_difficulty is not None, name
        longest = max(len(qwen_tokenizer(render(qwen_tokenizer, build_messages(env.generate(s, env.max_difficulty).prompt, 0.55)))["input_ids"])
                      for s in (0, 1))
        assert longest <= 1536, (name, longest)  # rlec.yaml's max_prompt_length is 2048


# ---- answer parsing ----

def test_parse_int_forms():
    assert [parse_int(s) for s in ("42", "-7", "+3", "1,234", "1{,}234", "1\\,234", "$12$", "\\text{5}", "\u22123", "8.")] == \
        [42, -7, 3, 1234, 1234, 1234, 12, 5, -3, 8]
    assert [parse_int(s) for s in ("1,23", "4.5", "x", "", "1e3", "12 34 5")] == [None, None, None, None, None, 12345]
    assert parse_int("9" * 5000) is None  # beyond int()'s digit limit: no exception


def test_parse_int_list_forms():
    assert parse_int_list("[3, -1, 2]") == [3, -1, 2]
    assert parse_int_list("3 -1 2") == [3, -1, 2]
    assert parse_int_list("\\{3; 1\\}") == [3, 1]
    assert parse_int_list("3, a") is None and parse_int_list("[]") is None


# ---- environment-specific checks ----

def test_maze_sizes_of_the_pass_at_k_paper():
    assert [size_of_difficulty(difficulty_of_size(s)) for s in TRAIN_SIZES + TEST_SIZES] == list(TRAIN_SIZES + TEST_SIZES)
    assert [difficulty_of_size(s) for s in TRAIN_SIZES] == [2, 3, 4, 5]
    assert get_environment("maze").eval_difficulties == (1, 6, 7, 8)
    with pytest.raises(ValueError):
        difficulty_of_size(8)


def test_mazes_are_solvable_and_well_formed_at_every_paper_size():
    env = get_environment("maze")
    for size in TRAIN_SIZES + TEST_SIZES:
        for seed in range(5):
            rows = env.generate(seed, difficulty_of_size(size)).data["rows"]
            assert len(rows) == size and all(len(r) == size for r in rows)
            assert set("".join(rows)) == {"S", "E", ".", "*"}
            assert "".join(rows).count("S") == "".join(rows).count("E") == 1
            assert rows[0] == rows[-1] == "*" * size and all(r[0] == r[-1] == "*" for r in rows)
            goal = next((r, row.index("E")) for r, row in enumerate(rows) if "E" in row)
            assert shortest_path(rows, _maze_start(rows), goal) is not None


def test_maze_verdicts_wall_off_grid_and_answer_forms():
    env = get_environment("maze")
    problem = Problem("maze", 0, 0, "p", "RR", {"rows": ["S.E", "*.*", "..."], "size": 3})
    assert env.verify(boxed("RR"), problem).correct
    assert env.verify(boxed("R R"), problem).correct and env.verify(boxed("r, r"), problem).correct
    assert env.verify(boxed("D"), problem).reason == "wall"
    assert env.verify(boxed("U"), problem).reason == "off_grid"
    assert env.verify(boxed("L"), problem).reason == "off_grid"
    assert env.verify(boxed("R"), problem).reason == "not_at_exit"
    assert env.verify(boxed("RDURR"), problem).reason == "off_grid"  # passes E, then leaves the grid
    assert env.verify(boxed("RDU"), problem).reason == "not_at_exit"
    assert env.verify(boxed("RD UR"), problem).correct  # a detour that ends on E
    assert env.verify("think... <answer>RR</answer>", problem).correct
    assert env.verify("<answer>\\boxed{RR}</answer>", problem).correct
    assert not env.verify("\\boxed{RR} then I changed my mind <answer>R</answer>", problem).correct  # the last one counts
    assert env.verify("<answer>R</answer> no wait: \\boxed{RR}", problem).correct
    assert env.verify("<answer>I don't know</answer>", problem).abstained


def test_linear_equations_named_and_fraction_answers():
    env = get_environment("linear_equations")
    problem = env.generate(3, 4)  # 3 unknowns
    names, values = problem.data["names"], problem.data["solution"]
    assert len(names) == 3 and determinant(problem.data["matrix"]) != 0
    named = ", ".join(f"{n} = {v}" for n, v in reversed(list(zip(names, values))))
    assert env.verify(boxed(named), problem).correct
    assert env.verify(boxed(", ".join(f"{2 * v}/2" for v in values)), problem).correct
    partial = env.verify(boxed(f"{names[0]} = {values[0]}"), problem)
    assert not partial.correct and abs(partial.score - 1 / 3) < 1e-9


def test_counting_matches_brute_force():
    import itertools

    for bounds, total in (([2, 3], 4), ([1, 1, 1], 2), ([3, 0, 2], 3), ([4, 4, 4, 4], 7), ([2], 5)):
        brute = sum(1 for xs in itertools.product(*(range(u + 1) for u in bounds)) if sum(xs) == total)
        assert bounded_compositions(total, bounds) == brute


def test_shortest_path_matches_floyd_warshall():
    env = get_environment("shortest_path")
    for seed in range(5):
        data = env.generate(seed, 6).data
        n, inf = data["n"], float("inf")
        dist = [[0 if i == j else inf for j in range(n)] for i in range(n)]
        for u, v, w in data["edges"]:
            dist[u][v] = dist[v][u] = min(dist[u][v], w)
        for k in range(n):
            for i in range(n):
                for j in range(n):
                    dist[i][j] = min(dist[i][j], dist[i][k] + dist[k][j])
        assert dist[0][data["target"]] == data["distance"] == dijkstra(n, data["edges"], 0)[data["target"]]


def test_knights_knaves_puzzles_have_exactly_one_solution():
    env = get_environment("knights_knaves")
    for d in (0, 2, 5):
        for seed in range(4):
            data = env.generate(seed, d).data
            assert solutions(len(data["names"]), data["statements"], limit=3) == [tuple(data["kinds"])]


def test_knights_knaves_answer_by_name_in_any_order():
    env = get_environment("knights_knaves")
    problem = env.generate(1, 2)
    pairs = list(zip(problem.data["names"], problem.data["kinds"]))
    text = "; ".join(f"{n} is a {'knight' if k else 'knave'}" for n, k in reversed(pairs))
    assert env.verify(boxed(text), problem).correct


def test_base_conversion_round_trip_and_prefixes():
    for value in (0, 1, 255, 4096, 123456789):
        for base in range(2, 17):
            assert int(to_base(value, base), base) == value
    env = get_environment("base_conversion")
    problem = Problem("base_conversion", 0, 0, "p", "FF", {"value": 255, "source_base": 10, "target_base": 16, "written": "255"})
    for answer in ("FF", "ff", "0xFF", "FF_{16}", "00FF", "\\text{FF}"):
        assert env.verify(boxed(answer), problem).correct, answer
    assert env.verify(boxed("FG"), problem).reason == "unparsable"

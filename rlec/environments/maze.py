"""The Maze of Pass@k Training (arXiv 2508.10751, Sec. 5): walk from S to E on a grid of walls.

The grid is n x n characters: ``S`` start, ``E`` exit, ``.`` open, ``*`` wall. The answer is a
move string over ``U`` (up), ``D`` (down), ``L`` (left), ``R`` (right), read from
``<answer>...</answer>`` or the last ``\\boxed{}`` (whichever comes last; spaces and commas
between moves are ignored). Following the moves from S: stepping off the grid or onto a wall
scores 0 at once; ending on E scores 1; ending anywhere else scores 0.

Difficulty d: the grid side is n = 5 + 2d (d = 0: 5 x 5). The paper's training sizes 9, 11, 13, 15
are d = 2..5 and its test sizes 7, 17, 19, 21 are d = 1, 6, 7, 8 (:data:`TRAIN_SIZES`,
:data:`TEST_SIZES`, :func:`difficulty_of_size`); to train on the paper's sizes only, bound the
controller of ``maze`` to [2, 5] (docs/environments.md).

Generator: a perfect maze (exactly one path between any two open cells) carved by a randomized
depth-first search over the cells at odd coordinates, framed by walls; S and E are two distinct
cells, E the farthest of 4 random candidates from S, so the path is long. Every maze is solvable
by construction and the reference answer is its breadth-first shortest path.
"""

from __future__ import annotations

import random
import re
from collections import deque
from typing import Any

from rlec.environments.base import Environment, Problem
from rlec.grading.extract import extract, final_segment, is_abstention, strip_wrappers

TRAIN_SIZES = (9, 11, 13, 15)
TEST_SIZES = (7, 17, 19, 21)
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
WALL, OPEN, START, EXIT = "*", ".", "S", "E"
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s,;]+")
MAX_MOVES = 10_000


def size_of_difficulty(difficulty: int) -> int:
    """Grid side n = 5 + 2d."""
    return 5 + 2 * difficulty


def difficulty_of_size(size: int) -> int:
    """The difficulty whose grid side is ``size`` (odd, >= 5).

    Raises:
        ValueError: an even size or one below 5.
    """
    if size < 5 or size % 2 == 0:
        raise ValueError(f"maze sizes are odd and >= 5, got {size}")
    return (size - 5) // 2


def carve(n: int, rng: random.Random) -> list[list[str]]:
    """A perfect maze on an n x n grid (n odd): walls everywhere, then a randomized DFS opens the
    cells at odd coordinates and the walls between neighbours it visits."""
    grid = [[WALL] * n for _ in range(n)]
    start = (2 * rng.randrange(n // 2) + 1, 2 * rng.randrange(n // 2) + 1)
    grid[start[0]][start[1]] = OPEN
    stack = [start]
    while stack:
        r, c = stack[-1]
        options = [(r + 2 * dr, c + 2 * dc, dr, dc) for dr, dc in MOVES.values()
                   if 0 < r + 2 * dr < n - 1 and 0 < c + 2 * dc < n - 1 and grid[r + 2 * dr][c + 2 * dc] == WALL]
        if not options:
            stack.pop()
            continue
        nr, nc, dr, dc = rng.choice(options)
        grid[r + dr][c + dc] = OPEN
        grid[nr][nc] = OPEN
        stack.append((nr, nc))
    return grid


def shortest_path(grid: list[str] | list[list[str]], start: tuple[int, int], goal: tuple[int, int]) -> str | None:
    """The breadth-first shortest move string from ``start`` to ``goal`` over non-wall cells, or None."""
    n_rows, n_cols = len(grid), len(grid[0])
    previous: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves = []
            while previous[cell] is not None:
                cell, move = previous[cell]  # type: ignore[misc]
                moves.append(move)
            return "".join(reversed(moves))
        for move, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < n_rows and 0 <= nxt[1] < n_cols and grid[nxt[0]][nxt[1]] != WALL and nxt not in previous:
                previous[nxt] = (cell, move)
                queue.append(nxt)
    return None


def walk(rows: list[str], moves: str) -> tuple[float, str]:
    """Follow ``moves`` from S: ``(1.0, "correct")`` when it ends on E, else ``(0.0, reason)`` with
    reason "off_grid", "wall" or "not_at_exit"."""
    r, c = next((i, row.index(START)) for i, row in enumerate(rows) if START in row)
    for move in moves:
        dr, dc = MOVES[move]
        r, c = r + dr, c + dc
        if not (0 <= r < len(rows) and 0 <= c < len(rows[r])):
            return 0.0, "off_grid"
        if rows[r][c] == WALL:
            return 0.0, "wall"
    return (1.0, "correct") if rows[r][c] == EXIT else (0.0, "not_at_exit")


class Maze(Environment):
    """Find a path through an n x n maze, n = 5 + 2d."""

    name = "maze"
    difficulty_scale = "the grid is n x n with n = 5 + 2d (training sizes 9-15 are d = 2..5)"
    max_difficulty = 18  # 41 x 41, ~1,000 prompt tokens
    eval_difficulties = tuple(difficulty_of_size(s) for s in TEST_SIZES)

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        n = size_of_difficulty(difficulty)
        grid = carve(n, rng)
        cells = [(r, c) for r in range(1, n, 2) for c in range(1, n, 2)]
        start = rng.choice(cells)
        candidates = rng.sample([cell for cell in cells if cell != start], min(4, len(cells) - 1))
        paths = {cell: shortest_path(grid, start, cell) for cell in candidates}
        goal = max(candidates, key=lambda cell: (len(paths[cell] or ""), cell))
        grid[start[0]][start[1]], grid[goal[0]][goal[1]] = START, EXIT
        rows = ["".join(row) for row in grid]
        solution = paths[goal]
        assert solution is not None  # a perfect maze connects every cell
        prompt = (
            f"Find a path through this {n} x {n} maze from S to E. '*' is a wall, '.' is open floor; you may "
            "move one cell at a time up (U), down (D), left (L) or right (R), never into a wall or off the "
            "grid. Row 1 is the top row.\n\n" + "\n".join(rows) + "\n\n"
            "Give the path as one string of moves, for example RRDDL, that ends on E."
        )
        return prompt, solution, {"rows": rows, "size": n}

    def extract_answer(self, response: str) -> tuple[str | None, str, bool]:
        """The last ``<answer>...</answer>`` or ``\\boxed{}`` of the response, whichever ends later."""
        segment = final_segment(response)
        tags = list(_ANSWER_TAG.finditer(segment))
        answer, source, abstained = super().extract_answer(response)
        if tags and (answer is None or source == "answer_line" or tags[-1].end() > segment.rfind("\\boxed")):
            text = tags[-1].group(1).strip()
            boxed = extract(text)  # <answer>\boxed{RRD}</answer>
            text = boxed.answer if boxed.source == "boxed" and boxed.answer is not None else text
            return text, "answer_tag", is_abstention(text)
        return answer, source, abstained

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        moves = _SEPARATORS.sub("", strip_wrappers(answer)).upper()
        if not moves or len(moves) > MAX_MOVES or any(m not in MOVES for m in moves):
            return 0.0, "unparsable"
        return walk(problem.data["rows"], moves)

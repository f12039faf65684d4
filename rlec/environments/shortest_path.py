"""Shortest path: the least total weight between two nodes of a small weighted graph.

Difficulty d: the undirected graph has V = 4 + d nodes (numbered 0..V-1), a random spanning tree
plus about V // 2 extra edges (no repeats, no loops), integer weights in [1, 5 + d]. The question
asks for the distance from node 0 to the node farthest from it in hops among three random
candidates. The answer is one integer (Dijkstra's distance); the score is 1 for it, else 0.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

from rlec.environments.base import Environment, Problem, parse_int


def dijkstra(n: int, edges: list[list[int]], source: int) -> list[float]:
    """Distances from ``source`` over undirected weighted ``edges`` [[u, v, w], ...]; inf if unreachable."""
    adjacency: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for u, v, w in edges:
        adjacency[u].append((v, w))
        adjacency[v].append((u, w))
    dist = [float("inf")] * n
    dist[source] = 0
    heap = [(0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in adjacency[u]:
            if d + w < dist[v]:
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return dist


def hops(n: int, edges: list[list[int]], source: int) -> list[float]:
    """Edge counts of the fewest-edge paths from ``source`` (Dijkstra with unit weights)."""
    return dijkstra(n, [[u, v, 1] for u, v, _ in edges], source)


class ShortestPath(Environment):
    """Weighted shortest distance on a connected graph of V = 4 + d nodes."""

    name = "shortest_path"
    difficulty_scale = "the graph has V = 4 + d nodes and about 1.5 V edges, weights up to 5 + d"
    max_difficulty = 40

    def _generate(self, rng: random.Random, difficulty: int) -> tuple[str, str, dict[str, Any]]:
        n, w_max = 4 + difficulty, 5 + difficulty
        order = list(range(n))
        rng.shuffle(order)
        pairs = {tuple(sorted((order[i], order[rng.randrange(i)]))) for i in range(1, n)}  # spanning tree
        all_pairs = [(u, v) for u in range(n) for v in range(u + 1, n) if (u, v) not in pairs]
        pairs |= set(rng.sample(all_pairs, min(len(all_pairs), n // 2)))
        edges = [[u, v, rng.randint(1, w_max)] for u, v in sorted(pairs)]
        rng.shuffle(edges)
        far = hops(n, edges, 0)
        target = max(rng.sample(range(1, n), min(3, n - 1)), key=lambda v: (far[v], v))
        distance = int(dijkstra(n, edges, 0)[target])
        listing = "\n".join(f"{u} - {v}: {w}" for u, v, w in edges)
        prompt = (f"An undirected graph has {n} nodes, numbered 0 to {n - 1}, and these weighted edges "
                  f"(u - v: weight):\n\n{listing}\n\nWhat is the total weight of the shortest path from node 0 "
                  f"to node {target}? Give the total weight as an integer.")
        return prompt, str(distance), {"n": n, "edges": edges, "target": target, "distance": distance}

    def check(self, answer: str, problem: Problem) -> tuple[float, str]:
        value = parse_int(answer)
        if value is None:
            return 0.0, "unparsable"
        return (1.0, "correct") if value == int(problem.data["distance"]) else (0.0, "wrong")

"""Fresh ids (`completion.random_hex`): random bytes read from the OS in pools, never the same
twice, and a forked worker never draws its parent's."""

from __future__ import annotations

import os

from agent_reach.chat.completion import random_hex


def test_ids_are_fresh_across_many_pools() -> None:
    ids = [random_hex() for _ in range(5000)]  # ~15 reads of the OS's source
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 24 and int(i, 16) >= 0 for i in ids)


def test_a_forked_child_draws_none_of_its_parents_pool() -> None:
    random_hex()  # the parent holds a pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then gone
        os.write(write, random_hex().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 64).decode() != random_hex()

def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    return []  # TODO

def move_back(r, keys, ids) -> None:
    """Step 2: put each id back in keys.pending at its arrival number (its row keeps it), as reap.lua
    does, then mark its row pending, and only then take it out of keys.active: a crash between any
    two writes leaves the job where a claim, reap.lua or this reaper run again can run it."""
    pass  # TODO: with separate commands -- this is the two-step reaper, the contrast

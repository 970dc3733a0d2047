def read_expired(r, keys) -> list[str]:
    """Step 1: the ids in keys.active whose lease deadline is at or before the server's now."""
    return []  # TODO

def move_back(r, keys, ids) -> None:
    """Step 2: move each id from keys.active to keys.pending (score 0) and mark its row pending."""
    pass  # TODO: with separate commands -- this is the two-step reaper, the contrast

from functools import lru_cache


@lru_cache(maxsize=1024)
def key_of(job_id: str) -> str:
    return f"charge:{job_id}"  # worked out once per job in this worker; the same text in any worker


def charge_order(claim, bank):
    card, cents = claim.payload.rsplit(" ", 1)
    bank.charge(card, int(cents), idempotency_key=key_of(claim.job_id))

# expect: which two ids minted in one millisecond share
def charge_order(claim, bank) -> None:
    card, cents = claim.payload.split()
    bank.charge(card, int(cents), idempotency_key=claim.job_id[:13])  # JOB + its first 10 characters

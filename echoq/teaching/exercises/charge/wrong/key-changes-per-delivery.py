def charge_order(claim, bank) -> None:
    """Charge the order in claim.payload ("<card> <cents>") once, however often it is delivered."""
    card, cents = claim.payload.split()
    bank.charge(card, int(cents), idempotency_key=f"{claim.job_id}-{claim.token}")

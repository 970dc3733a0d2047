def charge_order(claim, bank):
    card, cents = claim.payload.split(" ")
    key = f"order-{claim.job_id}"  # any text made from the JOB id alone, the same on every delivery
    bank.charge(card, int(cents), idempotency_key=key)

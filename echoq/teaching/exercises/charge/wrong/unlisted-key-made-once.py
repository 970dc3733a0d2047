# expect: an idempotency key it had already sent for another order
key = None

def charge_order(claim, bank):
    global key
    if key is None:
        key = claim.job_id  # made once, then the same on every delivery
    card, cents = claim.payload.split()
    bank.charge(card, int(cents), idempotency_key=key)

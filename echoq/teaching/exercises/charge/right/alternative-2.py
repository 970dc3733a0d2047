def charge_order(claim, bank):
    card, _, cents = claim.payload.partition(" ")
    charge = bank.charge(card=card, cents=int(cents), idempotency_key=str(claim.job_id))
    return charge.number

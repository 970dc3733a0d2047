seen = set()  # the jobs this worker has charged

def charge_order(claim, bank):
    if claim.job_id in seen:
        return
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))
    seen.add(claim.job_id)

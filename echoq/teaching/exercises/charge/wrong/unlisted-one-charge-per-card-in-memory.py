# expect: were charged 1 time(s) in all, not 2
charged = set()  # (card, cents) this worker has charged: a customer is not charged twice for one amount

def charge_order(claim, bank):
    card, cents = claim.payload.split()
    if (card, cents) in charged:
        return
    bank.charge(card, int(cents), idempotency_key=claim.job_id)
    charged.add((card, cents))

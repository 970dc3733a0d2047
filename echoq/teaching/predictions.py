"""The course's predict-then-run questions, lesson by lesson.

A lesson asks one with ``course.ask("02", "crash")`` in a cell BEFORE the run that reveals
the answer; ``reveals`` is a piece of that run's code. Every option carries its own
explanation: the right one says why, each wrong one says what it overlooks.
tests/test_notebook_format.py checks that every lesson asks at least two, each before the
first cell containing its ``reveals``.
"""

from __future__ import annotations

Option = tuple[str, str]  # (what the learner may pick, the explanation shown when picked)

QUESTIONS: dict[str, dict[str, tuple[str, list[Option], int]]] = {}
REVEALED_BY: dict[tuple[str, str], str] = {}  # (lesson, key) -> code of the run that answers it


def question(lesson: str, key: str, text: str, options: list[Option], answer: int, *, reveals: str) -> None:
    QUESTIONS.setdefault(lesson, {})[key] = (text, options, answer)
    REVEALED_BY[(lesson, key)] = reveals


# -- 00 ---------------------------------------------------------------------------------------

question(
    "00",
    "where",
    "The job was enqueued and nobody has taken it yet. Where is it on the server?",
    [
        (
            "In emq:{lesson-00}:pending, waiting for a worker.",
            "Enqueue puts a job in the pending set, and nothing has moved it since.",
        ),
        ("In emq:{lesson-00}:active.", "Active holds the jobs a worker is working on; no worker has claimed this one."),
        (
            "Only in this notebook's memory.",
            "Enqueue is a command to the server: the job is there whatever this notebook does next.",
        ),
    ],
    0,
    reveals="q.snapshot().counts",
)
question(
    "00",
    "order",
    'You enqueue "first", then "second". Which one does the next claim take?',
    [
        (
            '"second": the newest.',
            "That would be a stack. The pending set hands out the smallest id, which is the oldest.",
        ),
        (
            '"first": the oldest.',
            "JOB ids sort in the order they were made and the claim takes the smallest: the oldest goes first.",
        ),
        (
            "Either: a set has no order.",
            "A sorted set has one: by score, then by the bytes of the id; all pending ids have score 0.",
        ),
    ],
    1,
    reveals="q.claim().payload",
)

# -- 01 ---------------------------------------------------------------------------------------

question(
    "01",
    "pending",
    "Five jobs wait. The naive worker finishes job 1 and job 2, pops job 3 and is killed (SIGKILL). "
    "How many jobs are still in emq:{q}:pending afterwards?",
    [
        (
            "5: a crash changes nothing on the server.",
            "Jobs 1 to 3 were popped: the pop took each out of pending for good.",
        ),
        ("3: job 3 goes back, and jobs 4 and 5 wait.", "Nothing puts job 3 back: the pop deleted it from the server."),
        ("2: jobs 4 and 5.", "The worker never touched them; the three it popped left pending when it popped them."),
        ("0: the crash empties the queue.", "The queue lives on the server, which the kill did not touch."),
    ],
    2,
    reveals="processes.spawn(naive_worker",
)
question(
    "01",
    "job3",
    "Where is job 3, the one the worker held when it was killed?",
    [
        (
            "Back in pending, first in line.",
            "No script ran after the kill; the pop had already removed it from pending.",
        ),
        ("In emq:{q}:active.", "The naive pop has no active set: it moves the job nowhere."),
        (
            "In the worker's memory, until it restarts.",
            "The worker's memory died with the process; a restarted worker starts empty.",
        ),
        (
            "Nowhere: no key on the server mentions it.",
            "The pop took it out of pending and deleted its row in the same step.",
        ),
    ],
    3,
    reveals="snap.place_of(ids[2])",
)

# -- 02 ---------------------------------------------------------------------------------------

question(
    "02",
    "crash",
    "A worker process claims the job under a 300 ms lease and is killed (SIGKILL) right after. Where is the job?",
    [
        ("Gone, as in lesson 01.", "The claim never took the job out of Valkey: it moved it from one set to another."),
        (
            "In emq:{lesson-02}:active, leased.",
            "A kill runs no script at all, so nothing moves the job: it stays where the claim put it.",
        ),
        ("Back in emq:{lesson-02}:pending.", "Something would have to move it back; a dead process sends no command."),
    ],
    1,
    reveals="processes.spawn(worker",
)
question(
    "02",
    "again",
    "The 300 ms have run out on the server's clock. The reaper runs, then another worker claims. "
    "What fencing token does that claim carry?",
    [
        (
            "None: the job died with its worker.",
            "The job sat in the active set all along; the reaper moves an expired lease back to pending.",
        ),
        ("1: the first worker never finished, so it does not count.", "The claim counts deliveries, finished or not."),
        (
            "2: every claim adds one.",
            "HINCRBY bumped the row's token at each claim: this is the second delivery, and 2 is its token.",
        ),
        (
            "0: the reaper resets it.",
            "The reaper only moves the id and marks the row pending; the token keeps counting.",
        ),
    ],
    2,
    reveals="again = q.claim(",
)

# -- 03 ---------------------------------------------------------------------------------------

question(
    "03",
    "receipts",
    "Three deliveries of one job; each worker sends the receipt through the ledger (keyed on the JOB id) "
    "and is killed before complete. How many receipts are in the outbox?",
    [
        (
            "1: the ledger knows the JOB id from the first time.",
            "The effect and its ledger entry are one script: later deliveries find the id and skip.",
        ),
        (
            "0: every worker died, so nothing counts.",
            "Each worker was killed AFTER its effect: the first one's receipt is on the server.",
        ),
        ("3: one per delivery.", "That is the naive consumer; the keyed one skips an id the ledger already holds."),
    ],
    0,
    reveals="processes.spawn(deliver_and_die",
)
question(
    "03",
    "stale-complete",
    "Worker A's lease ran out while it stalled; the reaper took the job back and worker B claimed it "
    "(token 2). Now A calls complete with its token, 1. What happens?",
    [
        (
            "COMPLETED: A did the work, after all.",
            "The fence compares A's token with the row's token, which B's claim made 2.",
        ),
        (
            "STALE: refused, and nothing changes.",
            "A no longer holds the job: the row says token 2. B's lease and work go on untouched.",
        ),
        (
            "GONE: the job no longer exists.",
            "The job exists: B holds it. GONE is the answer when there is no row at all.",
        ),
    ],
    1,
    reveals="fq.complete(a)",
)
question(
    "03",
    "stale-charge",
    "Worker A froze just before its charge. B claimed the job, charged card-7 and completed. "
    "Now A wakes up and goes on. How many times is card-7 charged in the end?",
    [
        (
            "Once: the fence stops A.",
            "The fence protects complete; A's charge goes to the bank, which knows nothing of leases or tokens.",
        ),
        ("Never: the two workers cancel out.", "B charged and completed before A woke up; nothing undoes a charge."),
        (
            "Twice: A charges too, then its complete is refused.",
            "The bank sees two requests with no key to tie them together, and charges both.",
        ),
    ],
    2,
    reveals="a.resume()",
)

# -- 04 ---------------------------------------------------------------------------------------

question(
    "04",
    "reap",
    "Three workers held jobs under leases of 200 ms, 30 s and 60 s, and all three died. "
    "The 200 ms have run out. Which jobs does reap() move back to pending?",
    [
        ("Only the 200 ms one.", "Its deadline is at or before the server's now; the others' are still ahead."),
        (
            "All three: their workers are dead.",
            "The reaper cannot see processes; it sees lease deadlines, and two have not come yet.",
        ),
        ("None until all three leases have run out.", "Each lease is judged on its own deadline."),
    ],
    0,
    reveals="moved = q.reap()",
)
question(
    "04",
    "race",
    "Reaper 1 read the expired job, then paused. Reaper 2 moved it back and worker B claimed it. Now reaper 1 "
    "moves what it read, and worker C asks for work. How many live workers hold the job afterwards?",
    [
        ("One: B.", "Reaper 1 does not look again before it moves: it takes the job out of B's active lease."),
        ("None: the job is lost.", "Every move puts the job in pending or active; it is never in neither."),
        ("Two: B and C.", "Reaper 1 moved B's job back to pending and C claimed it: one crash, two live deliveries."),
    ],
    2,
    reveals="move_back(r1",
)
question(
    "04",
    "poison",
    "A job kills every worker that claims it. With max_stalled = 2, at which stall does the stalled check "
    "put it in emq:{q}:dead?",
    [
        ("The 1st.", "Below max_stalled a stall is forgiven: 1 < 2, so the first one is recovered."),
        ("The 2nd.", "Each sweep adds one to the job's count and compares the new count: 2 >= 2 is fatal."),
        ("The 3rd.", "That is BullMQ's way of counting: its maxStalledCount counts the stalls it forgives."),
        (
            "Never: a job is always retried.",
            "Then one poison job would kill workers forever; the count is there to stop it.",
        ),
    ],
    1,
    reveals="pq.stalled_check(max_stalled=2)",
)

# -- 05 ---------------------------------------------------------------------------------------

question(
    "05",
    "after-effect",
    "A worker dies after the effect and before complete. Another worker's beat brings the job back and runs "
    "the keyed consumer on it. How many effects does the ledger hold for that job?",
    [
        (
            "1: one effect, however often the job is delivered.",
            "The second delivery finds the JOB id in the ledger and skips the effect.",
        ),
        (
            "0: the dead worker's effect is rolled back.",
            "Nothing rolls an effect back: it is on the server, written with its ledger entry.",
        ),
        ("2: it was delivered twice.", "Delivered twice, yes; but the keyed consumer runs the effect once per JOB id."),
    ],
    0,
    reveals="rescuer.work(burst=True)",
)
question(
    "05",
    "naive-chaos",
    "The same kills, with workers that run lesson 01's pop-and-process loop. How many jobs are lost?",
    [
        (
            "None: the workers are restarted.",
            "A restarted worker starts with an empty memory; the popped job was only there.",
        ),
        (
            "Some: one for each worker killed while holding a job.",
            "Each pop takes the job out of Valkey; a kill before its effect loses it.",
        ),
        ("All of them.", "Only the jobs in the hands of a killed worker; the others are still pending or done."),
    ],
    1,
    reveals="naive = run_chaos(",
)

# -- 06 ---------------------------------------------------------------------------------------

question(
    "06",
    "aof",
    "Valkey runs with the append-only file (appendfsync always). It acknowledged 100 jobs, and its PROCESS is "
    "killed with SIGKILL. How many jobs are there after the restart?",
    [
        (
            "0: a killed process saves nothing.",
            "With appendfsync always, every write was in the file, flushed to disk, before its reply went out.",
        ),
        (
            "Up to a second's worth fewer than 100.",
            "That is everysec, the common setting: it flushes once a second, and while a flush is slow it "
            "holds writes back for up to 2 s, replying all the same. With always, no reply goes out before "
            "its write is on disk.",
        ),
        (
            "All 100.",
            "Every acknowledged write was on disk before its reply: a killed process cannot take it back.",
        ),
    ],
    2,
    reveals="crash_and_restart(setting",
)
question(
    "06",
    "late-extension",
    "A 600 ms lease, extended every 550 ms. One extension reaches the server 200 ms late. What happens to the job?",
    [
        (
            "The lease runs out before the late extension arrives: another worker takes the job while this one works.",
            "An extension must leave room for a late one: extend every half a lease or more often.",
        ),
        (
            "Nothing: it was extended in time.",
            "550 + 200 = 750 ms after the last extension, but that one promised only 600.",
        ),
        (
            "The late extension is refused, and the worker stops at once.",
            "It is refused only if someone else already claimed the job; until then the job is simply exposed.",
        ),
    ],
    0,
    reveals="exercises.check_extend_lease(",
)
question(
    "06",
    "retries",
    "max_attempts = 3. One job fails twice and then succeeds; the other fails every time. Where do they end?",
    [
        ("Both in the dead set.", "The flaky one succeeds on its third attempt, which max_attempts still allows."),
        (
            "The flaky one done, the broken one in emq:{q}:dead with its last error.",
            "Three attempts each: the flaky job's third succeeds; the broken job's third failure is its last.",
        ),
        ("The broken one retried forever.", "retry dead-letters a job once its attempts reach max_attempts."),
    ],
    1,
    reveals="worker.work(burst=True)",
)

# -- 07 ---------------------------------------------------------------------------------------

question(
    "07",
    "crossslot",
    "claim.lua is called with the pending key of queue orders and the active key of queue billing, whose "
    "tags hash to different slots. What happens?",
    [
        (
            "It runs on orders' master and moves a job into billing's active set.",
            "billing's active set lives in another slot, perhaps on another master: no single master holds both.",
        ),
        (
            "The cluster splits it: each master runs the part that touches its own keys.",
            "A script is one atomic run on one master; nothing splits it, so nothing can run it across two slots.",
        ),
        (
            "It is refused before it runs: one script runs on one master, and these keys are in two slots.",
            "A script's keys must all be in one slot; the client refuses to send the call, and a server sent it "
            "anyway replies CROSSSLOT before the first line runs.",
        ),
    ],
    2,
    reveals='scripts.run(c, "claim", two_queues',
)
question(
    "07",
    "behind",
    "The replica's link to its master is cut. 100 jobs are enqueued and each enqueue is acknowledged. Then the "
    "master is killed and the replica promoted. How many of the 100 does the new master have?",
    [
        (
            "None: every one was written after the link was cut, and existed on the dead master only.",
            "Asynchronous replication acknowledges first and copies later; a master that dies in between takes "
            "the writes with it. WAIT is how a producer learns whether a replica has them.",
        ),
        (
            "All 100: Valkey replicates every write.",
            "It does, after it replies, and over a link that was cut here: none of them reached the replica.",
        ),
        (
            "The promotion is refused, so the old data comes back when the master restarts.",
            "The replica is promoted (this cluster lets any replica stand for election), and the old master "
            "rejoins as its replica, taking the new master's data.",
        ),
    ],
    0,
    reveals='acknowledged_then_failover(cluster, f"{lesson.queue.name}-async"',
)

// latency.cjs: BullMQ's side of bench/latency.py, bench/recovery.py and bench/ontime.py.
// Two roles, each its own process, speaking one JSON line at a time on stdout:
//
//   node latency.cjs worker <bullmq dir> <redis url> <queue> <options JSON>
//   node latency.cjs enqueue <bullmq dir> <redis url> <queue> <schedule JSON file>
//
// worker: one BullMQ Worker (defaults but what the options set: concurrency, lockDuration,
// stalledInterval). Prints {"ready": true} once connected; answers each "clock" line on
// stdin with {"clock": <ns>}; the handler's first act is to read the clock, so each start is
// (job index, attempt, ns) -- on CLOCK_MONOTONIC, which process.hrtime.bigint() reads on Linux
// and Python's time.monotonic_ns() too (the Python side checks it: its reads bracket ours).
// Options: expect (stop after this many starts and print them), hold (handlers never return:
// the process is killed holding its jobs), stream (print each start at once), fail_first
// (a job whose data says fail throws on its first attempt; its throw time is recorded).
//
// enqueue: adds the schedule's jobs [offset_ms, delay_ms, backoff_ms] on its own clock from
// the moment it reads "go" on stdin, each sent at its moment without waiting for the ones
// before to return (an open-loop producer), and prints the ns at which each add was sent
// and returned. With an "echoq" entry in the schedule it enqueues echoq jobs instead.
const path = require('path');
const fs = require('fs');
const readline = require('readline');
const [role, bullmqDir, url, name, extra] = process.argv.slice(2);
const { Queue, Worker } = require(path.join(bullmqDir, 'node_modules', 'bullmq'));

const now = () => process.hrtime.bigint();
const say = (obj) => process.stdout.write(JSON.stringify(obj, (k, v) => (typeof v === 'bigint' ? Number(v) : v)) + '\n');

function connectionOf(text) {
  const u = new URL(text);
  return {
    host: u.hostname,
    port: Number(u.port),
    password: u.password ? decodeURIComponent(u.password) : undefined,
    db: Number((u.pathname || '/0').slice(1) || 0),
    maxRetriesPerRequest: null,
  };
}

async function runWorker(connection, options) {
  const starts = [];
  let finish;
  const enough = new Promise((resolve) => { finish = resolve; });
  const processor = async (job) => {
    const started = now();
    const entry = [job.data.i, job.attemptsMade + 1, started, 0];
    starts.push(entry);
    if (options.stream) say({ s: entry });
    if (options.expect && starts.length >= options.expect) finish();
    if (options.hold) return new Promise(() => {});
    if (options.fail_first && job.data.fail && job.attemptsMade === 0) {
      entry[3] = now();
      throw new Error('first attempt fails');
    }
    return null;
  };
  const settings = { connection, concurrency: options.concurrency || 1 };
  for (const key of ['lockDuration', 'stalledInterval', 'drainDelay']) {
    if (options[key]) settings[key] = options[key];
  }
  const worker = new Worker(name, processor, settings);
  worker.on('error', () => {});
  await worker.waitUntilReady();
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    if (line === 'clock') say({ clock: now() });
    if (line === 'stop') finish();
  });
  say({ ready: true });
  await enough;
  await worker.close();
  const queue = new Queue(name, { connection });
  const counts = await queue.getJobCounts('completed', 'active', 'wait', 'delayed', 'failed', 'paused');
  await queue.close();
  say({ starts, counts });
  rl.close();
}

async function runEnqueue(connection, scheduleFile) {
  // The same producer for both libraries, so that neither side's figures depend on how fast
  // its own language's client can send: for echoq it calls enqueue.lua by its SHA (EVALSHA,
  // the keys and arguments Queue.enqueue sends), for BullMQ Queue.add.
  const plan = JSON.parse(fs.readFileSync(scheduleFile, 'utf8'));
  const schedule = plan.jobs;
  let add;
  let close;
  if (plan.echoq) {
    const Redis = require(path.join(bullmqDir, 'node_modules', 'ioredis'));
    const redis = new Redis(connection);
    redis.on('error', () => {});  // a server restarting: ioredis reconnects and sends again
    const { sha, keys, ids, keep_given_ms: keepGiven } = plan.echoq;
    add = (i, delayMs, fail) =>
      redis.evalsha(sha, keys[i].length, ...keys[i], ids[i], `${i} ${fail ? 1 : 0}`, delayMs, keepGiven);
    close = () => redis.quit();
    await redis.ping();
  } else {
    const queue = new Queue(name, { connection });
    queue.on('error', () => {});  // a server restarting: ioredis reconnects and sends again
    await queue.obliterate({ force: true });
    await queue.waitUntilReady();
    await queue.add('warm', { i: -1 }, { delay: 3600000 });  // scripts loaded before the clock starts
    await queue.obliterate({ force: true });
    add = (i, delayMs, fail) => {
      const opts = {};
      if (delayMs) opts.delay = delayMs;
      if (fail) { opts.attempts = 2; opts.backoff = { type: 'fixed', delay: fail }; }
      return queue.add('job', { i, fail: fail ? 1 : 0 }, opts);
    };
    close = () => queue.close();
  }
  const rl = readline.createInterface({ input: process.stdin });
  say({ ready: true });
  await new Promise((resolve) => rl.once('line', resolve));
  const t0 = now();
  const sent = [];
  const returned = new Array(schedule.length);
  const pending = [];
  for (let i = 0; i < schedule.length; i += 1) {
    const [offsetMs, delayMs, fail] = schedule[i];
    const due = t0 + BigInt(Math.round(offsetMs * 1e6));
    while (now() < due) {
      const leftMs = Number(due - now()) / 1e6;
      await new Promise((resolve) => (leftMs > 2 ? setTimeout(resolve, leftMs - 1) : setImmediate(resolve)));
    }
    // Not awaited: the calls go out on the schedule whatever their round trips (several may
    // be in flight on the connection), so both libraries get the same offered rate.
    sent.push(now());
    pending.push(add(i, delayMs, fail).then(() => { returned[i] = now(); }));
  }
  await Promise.all(pending);
  say({ sent, returned });
  rl.close();
  await close();
}

async function main() {
  const connection = connectionOf(url);
  if (role === 'worker') await runWorker(connection, JSON.parse(extra || '{}'));
  else if (role === 'enqueue') await runEnqueue(connection, extra);
  else throw new Error(`unknown role ${role}: use worker or enqueue`);
  // stdout to a pipe is written asynchronously: exit once the last line is out.
  process.stdout.write('', () => process.exit(0));
}

main().catch((err) => {
  process.stderr.write(`bullmq latency: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});

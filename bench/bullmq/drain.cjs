// drain.cjs: BullMQ's side of bench/throughput.py. Fills a queue with no-op jobs, then
// times one BullMQ Worker (default settings but concurrency: lock renewal on, stalled
// checks on) draining it, and prints one line of JSON.
//
//   node drain.cjs <bullmq dir> <redis url> <queue name> <jobs> <concurrency>
//
// The clock starts when the worker is connected and ready (as the echoq side starts at
// work()), and stops at the last 'completed' event. The queue is obliterated after the run;
// the counts read just before are printed so the bench can check that every job completed.
const path = require('path');
const [bullmqDir, url, name, jobsText, concurrencyText] = process.argv.slice(2);
const { Queue, Worker } = require(path.join(bullmqDir, 'node_modules', 'bullmq'));

async function main() {
  const jobs = Number(jobsText);
  const concurrency = Number(concurrencyText);
  const u = new URL(url);
  const connection = {
    host: u.hostname,
    port: Number(u.port),
    password: u.password ? decodeURIComponent(u.password) : undefined,
    db: Number((u.pathname || '/0').slice(1) || 0),
    maxRetriesPerRequest: null,
  };
  const queue = new Queue(name, { connection });
  await queue.obliterate({ force: true });
  for (let start = 0; start < jobs; start += 1000) {
    const n = Math.min(1000, jobs - start);
    await queue.addBulk(Array.from({ length: n }, () => ({ name: 'noop', data: {} })));
  }
  let completed = 0;
  let started = 0;
  const worker = new Worker(name, async () => {}, { connection, concurrency, autorun: false });
  const drained = new Promise((resolve) => {
    worker.on('completed', () => {
      completed += 1;
      if (completed === jobs) resolve(performance.now());
    });
  });
  await worker.waitUntilReady();
  started = performance.now();
  worker.run();
  const ended = await drained;
  await worker.close();
  const counts = await queue.getJobCounts('completed', 'active', 'wait', 'delayed', 'failed');
  await queue.obliterate({ force: true });
  await queue.close();
  process.stdout.write(JSON.stringify({ seconds: (ended - started) / 1000, completed, counts }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`bullmq bench: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});

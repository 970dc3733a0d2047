// drain.cjs: BullMQ's side of bench/throughput.py. Fills a queue with no-op jobs, then
// times one BullMQ Worker (default settings but concurrency: lock renewal on, stalled
// checks on) draining it, and prints one line of JSON.
//
//   node drain.cjs <bullmq dir> <redis url> <queue name> <jobs> <concurrency>
//
// The clock starts when the worker is connected and ready (as the echoq side starts at
// work()), and stops at the last 'completed' event. The queue is obliterated after the run;
// the counts read just before are printed so the bench can check that every job completed,
// with the CPU seconds this process and the server spent while the worker drained.
const path = require('path');
const [bullmqDir, url, name, jobsText, concurrencyText] = process.argv.slice(2);
const { Queue, Worker } = require(path.join(bullmqDir, 'node_modules', 'bullmq'));

// valkey-server's own CPU seconds (user + system), from INFO cpu.
function serverCpu(info) {
  const field = (name) => Number((info.match(new RegExp(`^${name}:([0-9.]+)`, 'm')) || [0, 0])[1]);
  return field('used_cpu_user') + field('used_cpu_sys');
}

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
  const redis = await queue.client;
  const serverBefore = serverCpu(await redis.info('cpu'));
  const cpuBefore = process.cpuUsage();
  started = performance.now();
  worker.run();
  const ended = await drained;
  const cpu = process.cpuUsage(cpuBefore);
  const serverCpuS = serverCpu(await redis.info('cpu')) - serverBefore;
  await worker.close();
  const counts = await queue.getJobCounts('completed', 'active', 'wait', 'delayed', 'failed');
  await queue.obliterate({ force: true });
  await queue.close();
  process.stdout.write(JSON.stringify({
    seconds: (ended - started) / 1000,
    completed,
    counts,
    client_cpu_s: (cpu.user + cpu.system) / 1e6,
    server_cpu_s: serverCpuS,
  }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`bullmq bench: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});

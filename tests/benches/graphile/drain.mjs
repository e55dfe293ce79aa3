// graphile-worker's drain of N no-op jobs, for the benchmark suite's side-by-side ratio:
// `node drain.mjs <database url> <jobs> <concurrency>`. The jobs are added in one statement
// before the clock starts; the worker runs with graphile-worker's defaults otherwise. Prints one
// JSON line: {"jobs": N, "ms": elapsed, "per_sec": rate}.
import { Logger, run, runMigrations } from "graphile-worker";
import pg from "pg";

const [connectionString, jobsText, concurrencyText] = process.argv.slice(2);
const jobs = Number(jobsText);
const concurrency = Number(concurrencyText);
// Silent: writing a line per job would measure the terminal, not the queue.
const logger = new Logger(() => () => {});

await runMigrations({ connectionString, logger });
const pool = new pg.Pool({ connectionString, max: 2 });
await pool.query(
  "SELECT graphile_worker.add_jobs(array_agg(ROW('noop', '{}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec)) FROM generate_series(1, $1)",
  [jobs],
);
await pool.query("ANALYZE graphile_worker._private_jobs");
const started = Date.now();
const runner = await run({
  connectionString,
  concurrency,
  logger,
  noHandleSignals: true,
  pollInterval: 1000,
  taskList: { noop: async () => {} },
});
for (;;) {
  const { rows } = await pool.query("SELECT count(*)::int AS left FROM graphile_worker._private_jobs");
  if (rows[0].left === 0) break;
  await new Promise((resolve) => setTimeout(resolve, 100));
}
const ms = Date.now() - started;
await runner.stop();
await pool.end();
console.log(JSON.stringify({ jobs, ms, per_sec: Math.round((jobs * 1000) / ms) }));

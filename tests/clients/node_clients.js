// node-postgres (pg) and porsager's postgres against `archiver serve`: connect,
// parameters, a named statement, several queries in flight on one connection, and a bad
// statement after which the connection goes on. Prints one JSON line per answer for
// tests/test_serve_clients.py. Usage: node node_clients.js PORT PASSWORD ID...
const { Client } = require('pg');
const postgres = require('postgres');

const [port, password, ...ids] = process.argv.slice(2);
const options = { host: '127.0.0.1', port: Number(port), user: 'archiver', password, database: 'archive' };
const say = (what, value) => console.log(JSON.stringify({ what, value }));

async function pg() {
  const client = new Client(options);
  await client.connect();
  const count = await client.query('SELECT count(*) FROM orders WHERE id >= $1', [0]);
  say('pg count', count.rows[0].count);
  for (const id of ids) {
    const row = await client.query({ name: 'by-id', text: 'SELECT id, status, total FROM orders WHERE id = $1', values: [id] });
    say('pg row', row.rows[0]);
  }
  const inflight = await Promise.all(ids.map((id) => client.query('SELECT id, total FROM orders WHERE id = $1', [id])));
  say('pg inflight', inflight.map((r) => r.rows[0]));
  const bad = await client.query('SELECT no_such_column FROM orders').catch((e) => e.code);
  say('pg bad', bad);
  say('pg after', (await client.query('SELECT 1 AS one')).rows[0].one);
  await client.end();
}

async function porsager() {
  const sql = postgres({ ...options, max: 1 });
  const count = await sql`SELECT count(*) FROM orders WHERE id >= ${0}`;
  say('postgres count', count[0].count);
  for (const id of ids) {
    const rows = await sql`SELECT id, status, total FROM orders WHERE id = ${id}`;
    say('postgres row', rows[0]);
  }
  const inflight = await Promise.all(ids.map((id) => sql`SELECT id, total FROM orders WHERE id = ${id}`));
  say('postgres inflight', inflight.map((r) => r[0]));
  const bad = await sql`SELECT no_such_column FROM orders`.catch((e) => e.code);
  say('postgres bad', bad);
  say('postgres after', (await sql`SELECT 1 AS one`)[0].one);
  await sql.end();
}

pg().then(porsager).catch((e) => { console.error(e); process.exit(1); });

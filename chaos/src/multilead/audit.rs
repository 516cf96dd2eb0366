//! The evidence of who acted for a run: an audit this command installs in the leads'
//! database once their schema is there. A trigger on every table a lead writes for a run
//! (`runs`, `checkpoints`, `run_events`, `receipts`, `outputs_snapshots`) and on each
//! change of owner or epoch in `run_leases` records, in the writing transaction, the row's
//! run, the writer (its connection's `application_name`: the lead incarnation, `lead-K.N`),
//! the table, the epoch and owner of a lease row, and a sequence number and the database's
//! clock at the write. A write rolled back leaves no audit row. The leads are not changed:
//! the database tells which incarnation wrote what, and the lease rows which epoch each
//! incarnation held.

use std::collections::HashMap;

use serde_json::Value;

/// Installs (again) the audit table, its function and the triggers.
const INSTALL: &str = r#"
CREATE TABLE IF NOT EXISTS chaos_writes (
    seq     bigserial PRIMARY KEY,
    at      double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
    writer  text NOT NULL,
    tbl     text NOT NULL,
    op      text NOT NULL,
    run_id  text,
    lead_id text,
    epoch   bigint,
    detail  text
);
CREATE OR REPLACE FUNCTION chaos_audit() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
    r jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN r := to_jsonb(OLD); ELSE r := to_jsonb(NEW); END IF;
    INSERT INTO chaos_writes (writer, tbl, op, run_id, lead_id, epoch, detail)
    VALUES (current_setting('application_name'), TG_TABLE_NAME, TG_OP, r->>'run_id',
            r->>'lead_id', (r->>'epoch')::bigint,
            COALESCE('step ' || (r->>'step'), 'seq ' || (r->>'seq'), r->>'status'));
    RETURN NULL;
END
$f$;
DROP TRIGGER IF EXISTS chaos_audit ON runs;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
DROP TRIGGER IF EXISTS chaos_audit ON checkpoints;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
DROP TRIGGER IF EXISTS chaos_audit ON run_events;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON run_events
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
DROP TRIGGER IF EXISTS chaos_audit ON receipts;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON receipts
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
DROP TRIGGER IF EXISTS chaos_audit ON outputs_snapshots;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON outputs_snapshots
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
DROP TRIGGER IF EXISTS chaos_audit ON run_leases;
CREATE TRIGGER chaos_audit AFTER INSERT ON run_leases
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
DROP TRIGGER IF EXISTS chaos_audit_owner ON run_leases;
CREATE TRIGGER chaos_audit_owner AFTER UPDATE ON run_leases
    FOR EACH ROW WHEN (OLD.lead_id IS DISTINCT FROM NEW.lead_id OR OLD.epoch IS DISTINCT FROM NEW.epoch)
    EXECUTE FUNCTION chaos_audit();
"#;

/// Installs the audit (the leads' schema must be there: a lead has started).
pub async fn install(pg: &tokio_postgres::Client) -> anyhow::Result<()> {
    pg.batch_execute(INSTALL).await?;
    Ok(())
}

/// One audited write (a run's are read in the order written).
#[derive(Debug, Clone)]
pub struct Write {
    /// The database's clock, seconds since the Unix epoch.
    pub at: f64,
    /// The lead incarnation that wrote it (`lead-K.N`).
    pub writer: String,
    pub table: String,
    /// For a `run_leases` row: its owner (`None`: released) and epoch.
    pub lead_id: Option<String>,
    pub epoch: Option<i64>,
    /// The checkpoint's step, the event's seq or the run's status.
    pub detail: String,
}

/// What the database holds of the schedule's runs: each one's audited writes in order,
/// its events, its lease's epoch now.
#[derive(Debug, Default)]
pub struct Evidence {
    pub writes: HashMap<String, Vec<Write>>,
    pub events: HashMap<String, Vec<Value>>,
    pub epochs: HashMap<String, i64>,
}

/// Reads the evidence of `runs`.
pub async fn read(pg: &tokio_postgres::Client, runs: &[String]) -> anyhow::Result<Evidence> {
    let mut evidence = Evidence::default();
    for row in pg
        .query(
            "SELECT at, writer, tbl, run_id, lead_id, epoch, COALESCE(detail, '') \
             FROM chaos_writes WHERE run_id = ANY($1) ORDER BY seq",
            &[&runs],
        )
        .await?
    {
        evidence.writes.entry(row.get(3)).or_default().push(Write {
            at: row.get(0),
            writer: row.get(1),
            table: row.get(2),
            lead_id: row.get(4),
            epoch: row.get(5),
            detail: row.get(6),
        });
    }
    for row in pg
        .query(
            "SELECT run_id, event FROM run_events WHERE run_id = ANY($1) ORDER BY run_id, seq",
            &[&runs],
        )
        .await?
    {
        let event: &str = row.get(1);
        evidence
            .events
            .entry(row.get(0))
            .or_default()
            .push(serde_json::from_str(event).unwrap_or(Value::Null));
    }
    for row in pg
        .query(
            "SELECT run_id, epoch FROM run_leases WHERE run_id = ANY($1)",
            &[&runs],
        )
        .await?
    {
        evidence.epochs.insert(row.get(0), row.get(1));
    }
    Ok(evidence)
}

/// The database's clock now, seconds since the Unix epoch.
pub async fn now(pg: &tokio_postgres::Client) -> Option<f64> {
    pg.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await
        .ok()
        .map(|r| r.get(0))
}

/// Each run's last checkpointed state and its receipts, as the run checks read them.
pub async fn stored(
    pg: &tokio_postgres::Client,
    runs: &[String],
) -> anyhow::Result<HashMap<String, (Value, u32)>> {
    let mut out = HashMap::new();
    for row in pg
        .query(
            "SELECT DISTINCT ON (c.run_id) c.run_id, c.state, \
                 (SELECT count(*) FROM receipts r WHERE r.run_id = c.run_id) \
             FROM checkpoints c WHERE c.run_id = ANY($1) ORDER BY c.run_id, c.step DESC",
            &[&runs],
        )
        .await?
    {
        let state: &str = row.get(1);
        let receipts: i64 = row.get(2);
        out.insert(
            row.get(0),
            (
                serde_json::from_str(state).unwrap_or(Value::Null),
                receipts as u32,
            ),
        );
    }
    Ok(out)
}

//! Dropping relations of every kind, with `CASCADE`.
//!
//! Each kind leaves something behind besides its catalog entry: a materialized view its
//! job and rows, a sink its job, a table its rows. `CASCADE` drops everything that reads
//! the relation first, newest first, so each drop finds no dependents left.

use super::Engine;
use crate::catalog::{Relation, RelationKind};
use crate::error::Result;

/// Drops `rel`, and with `cascade` every relation that depends on it (directly or not).
/// Without `cascade`, a relation with dependents is refused (2BP01).
pub(super) fn drop_relation(engine: &Engine, rel: &Relation, cascade: bool) -> Result<()> {
    if cascade {
        for dependent in dependents_of(engine, rel.id) {
            drop_one(engine, &dependent)?;
        }
    } else {
        // Its indexes go with a table or view (as in PostgreSQL and RisingWave), once
        // nothing else depends on it.
        let relations = engine.catalog.relations();
        let dependents: Vec<&Relation> = relations
            .iter()
            .filter(|r| r.depends_on.contains(&rel.id))
            .collect();
        if dependents.iter().all(|r| r.kind == RelationKind::Index) {
            for index in dependents {
                drop_one(engine, index)?;
            }
        }
    }
    drop_one(engine, rel)
}

/// Deletes, in the background, the epochs an exactly-once Kafka sink staged and had not
/// published yet.
fn forget_staged_epochs(engine: &Engine, rel: &Relation) {
    let (id, name) = (rel.id, rel.name.clone());
    let (state_store, s3) = (
        engine.config.state_store_location(),
        engine.config.s3.clone(),
    );
    tokio::spawn(async move {
        let deleted =
            crate::connectors::sink::kafka_commit::delete_staged(id, &state_store, &s3).await;
        if let Err(e) = deleted {
            tracing::warn!(sink = %name, "cannot delete the staged epochs of the dropped sink: {e}");
        }
    });
}

fn drop_one(engine: &Engine, rel: &Relation) -> Result<()> {
    engine.catalog.drop_relation(&rel.name)?;
    match rel.kind {
        RelationKind::MaterializedView | RelationKind::Sink => {
            engine.jobs.stop(&rel.name);
            engine.checkpoints.remove_commit_hook(&rel.name);
            super::jobs::clear_job_state(engine, rel)?;
            stop_logging_unread_tables(engine, rel)?;
            if rel.kind == RelationKind::Sink {
                forget_staged_epochs(engine, rel);
            }
        }
        _ => {}
    }
    if super::cdc::is_cdc_table(rel) {
        super::cdc::drop(engine, rel)?;
    }
    if super::kafka_tables::is_kafka_table(rel) {
        super::kafka_tables::drop(engine, rel)?;
    }
    if matches!(
        rel.kind,
        RelationKind::Table | RelationKind::MaterializedView
    ) {
        engine.schema_provider.state_table_for(rel)?.truncate()?;
        engine.schema_provider.forget(rel.id);
    }
    if rel.kind == RelationKind::Table {
        crate::state::table_log::delete(&engine.store, rel.id)?;
    }
    Ok(())
}

/// The tables a dropped view or sink read that nothing reads any more stop logging their
/// changes, and their logs go: no job will resume from them (a new one starts from the
/// table's rows), and without jobs no barrier would ever let them be cut.
fn stop_logging_unread_tables(engine: &Engine, dropped: &Relation) -> Result<()> {
    let relations = engine.catalog.relations();
    for id in &dropped.depends_on {
        let Some(table) = relations
            .iter()
            .find(|r| r.id == *id && r.kind == RelationKind::Table)
        else {
            continue;
        };
        if relations.iter().any(|r| r.depends_on.contains(id)) {
            continue;
        }
        engine
            .schema_provider
            .state_table_for(table)?
            .changes()
            .disable_log(|| crate::state::table_log::delete(&engine.store, *id))?;
    }
    Ok(())
}

/// Every relation reading `id`, directly or through others, newest first.
fn dependents_of(engine: &Engine, id: u32) -> Vec<Relation> {
    let relations = engine.catalog.relations();
    let mut found: Vec<Relation> = Vec::new();
    let mut frontier = vec![id];
    while let Some(current) = frontier.pop() {
        for r in &relations {
            if r.depends_on.contains(&current) && !found.iter().any(|f| f.id == r.id) {
                frontier.push(r.id);
                found.push(r.clone());
            }
        }
    }
    found.sort_by_key(|r| std::cmp::Reverse(r.id));
    found
}

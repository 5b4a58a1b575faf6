//! The SeaORM store's batched statements: `renew_many` / `renew_batch` and `release_many`
//! (`purge` is in `purge.rs`); each database's own rounds are its driver's
//! (`backend/<database>/driver.rs`).
//!
//! One locked row never holds a batch hostage: PostgreSQL and MySQL lock the batch's rows with
//! `FOR UPDATE SKIP LOCKED` and renew those; an item whose row another session holds locked (an
//! open fenced transaction, a rival's grant) is left untouched and answered
//! [`BatchRenewal::Unknown`] at once, for the caller to ask alone. `renew_batch` never waits for
//! such a row, so the other items' answers never wait for it either (the engine's batcher asks
//! those items alone, each bounded, beside the batch); `renew_many`, which has no answer for
//! "ask alone", tries each such row alone itself, bounded by the server's lock timeout. SQLite has
//! no row locks: a batch waits for the database's write lock, bounded by the busy timeout.

use std::collections::HashMap;

use leasehold_core::{HolderId, LeaseKey, RenewOutcome, Term};

use crate::seaorm::get;
use crate::{BatchRenewal, LeaseStore, SeaOrmStore, StoreError, TenureRef};

impl SeaOrmStore {
    /// `renew_batch`: see the module docs. Each statement matches its rows to items by key, so
    /// the items go out in rounds in which every key appears once: two tenures of one key in
    /// one batch are two rounds (only the one whose token the row carries can be renewed), and
    /// an item named twice is answered as its first occurrence is, as two single renewals of a
    /// live tenure both renew it.
    pub(crate) async fn renew_items(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        let mut first: HashMap<&TenureRef, usize> = HashMap::new();
        let mut next_round: HashMap<&LeaseKey, usize> = HashMap::new();
        let mut rounds: Vec<Vec<usize>> = Vec::new();
        let mut copies: Vec<(usize, usize)> = Vec::new();
        for (i, it) in items.iter().enumerate() {
            if let Some(&f) = first.get(it) {
                copies.push((i, f));
                continue;
            }
            first.insert(it, i);
            let round = next_round.entry(&it.key).or_insert(0);
            if rounds.len() <= *round {
                rounds.push(Vec::new());
            }
            rounds[*round].push(i);
            *round += 1;
        }
        if rounds.len() <= 1 && copies.is_empty() {
            return self.renew_round(holder, items, term).await;
        }
        let mut answers = vec![BatchRenewal::Lost; items.len()];
        for round in rounds {
            let sub: Vec<TenureRef> = round.iter().map(|&i| items[i].clone()).collect();
            let got = self.renew_round(holder, &sub, term).await?;
            for (&i, answer) in round.iter().zip(got) {
                answers[i] = answer;
            }
        }
        for (i, f) in copies {
            answers[i] = answers[f];
        }
        Ok(answers)
    }

    /// One round of [`SeaOrmStore::renew_items`]: every key at most once.
    async fn renew_round(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.sql
            .driver()
            .renew_round(self, holder, items, term)
            .await
    }

    /// A renewal round in one statement that answers the renewed rows
    /// (`RETURNING namespace, lease_name`), and with `reports_locked` the rows another session
    /// held locked too (a column `renewed`, 0 for those): they are answered
    /// [`BatchRenewal::Unknown`]. This statement did not touch them, so it knows nothing of
    /// their tenures, and waiting here for each would hold every other answer.
    pub(crate) async fn renew_in_one_statement(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
        reports_locked: bool,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        let op = "renew_many";
        let mut answers = vec![BatchRenewal::Lost; items.len()];
        let index: HashMap<(&str, &str), usize> = items
            .iter()
            .enumerate()
            .map(|(i, it)| ((it.key.namespace.as_str(), it.key.name.as_str()), i))
            .collect();
        let stmt = self.sql.renew_many(holder, items, term)?;
        for row in self.query_written(op, stmt).await? {
            let ns: String = get(&row, op, "namespace")?;
            let name: String = get(&row, op, "lease_name")?;
            let renewed = !reports_locked || get::<i32>(&row, op, "renewed")? == 1;
            if let Some(&i) = index.get(&(ns.as_str(), name.as_str())) {
                answers[i] = if renewed {
                    BatchRenewal::Renewed
                } else {
                    BatchRenewal::Unknown
                };
            }
        }
        Ok(answers)
    }

    /// `renew_many`: [`SeaOrmStore::renew_items`], then each item whose row another session
    /// held locked renewed alone, bounded by the server's lock timeout (still locked then:
    /// not renewed).
    pub(crate) async fn renew_items_waiting(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<bool>, StoreError> {
        let answers = self.renew_items(holder, items, term).await?;
        let mut renewed = Vec::with_capacity(answers.len());
        for (it, answer) in items.iter().zip(answers) {
            renewed.push(match answer {
                BatchRenewal::Unknown => match self.renew(&it.key, holder, it.token, term).await {
                    Ok(outcome) => outcome == RenewOutcome::Renewed,
                    Err(StoreError::ServerTimeout { .. }) => false,
                    Err(e) => return Err(e),
                },
                other => other == BatchRenewal::Renewed,
            });
        }
        Ok(renewed)
    }

    /// `release_many`: one statement per chunk.
    pub(crate) async fn release_items(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        if items.is_empty() {
            return Ok(0);
        }
        self.sql.driver().release_many(self, holder, items).await
    }
}

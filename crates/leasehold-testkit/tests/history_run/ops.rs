//! The lease-store calls of a session, each recorded per key with its window and answer (a
//! batch as one operation per item, a failed or timed-out call as an unknown outcome).

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, AllOutcome, BatchRenewal, FencingToken, Grant, HolderId, LeaseKey,
    ReleaseOutcome, RenewOutcome, TenureRef,
};
use leasehold_testkit::history::{Answer, Call, DbWindow, EVERY_KEY, Op};
use rand::RngExt;

use super::{Worker, bounded};

fn grant_answer(a: AcquireOutcome) -> Answer {
    match a {
        AcquireOutcome::Acquired { token, until } => Answer::Acquired {
            token: token.0,
            end: until.0,
        },
        AcquireOutcome::HeldBy {
            holder,
            until,
            token,
        } => Answer::HeldBy {
            holder: holder.as_str().to_owned(),
            token: token.0,
            end: until.0,
        },
    }
}

fn release_answer(a: Option<ReleaseOutcome>) -> Answer {
    match a {
        Some(ReleaseOutcome::Released) => Answer::Released,
        Some(ReleaseOutcome::NotHeld) => Answer::NotHeld,
        None => Answer::Unknown,
    }
}

impl Worker {
    pub(super) async fn grant(&mut self) {
        let (key, holder) = (self.key(), self.holder());
        self.grant_of(key, holder).await;
    }

    /// `begin_tenure` of `key` to `holder`.
    async fn grant_of(&mut self, key: LeaseKey, holder: String) {
        let (term, ms) = self.term();
        let h = HolderId::new(&holder).expect("holder");
        let s = self.start();
        let answer = bounded(
            self.session
                .store
                .begin_tenure(&key, &h, Grant::New, term, None),
        )
        .await;
        let w = self.finish(s).await;
        let answer = answer.map_or(Answer::Unknown, grant_answer);
        if let Answer::Acquired { token, end } = answer
            && ms < 1_000
        {
            self.mine = Some((key.clone(), holder.clone(), token, end, ms));
        }
        let call = Call::Grant { holder, term: ms };
        self.record("begin_tenure", &key, call, answer, w);
    }

    pub(super) async fn grant_many(&mut self) {
        let (keys, holder) = (self.some_keys(), self.holder());
        let (term, ms) = self.term();
        let h = HolderId::new(&holder).expect("holder");
        let s = self.start();
        let answers = bounded(self.session.store.begin_tenure_many(&h, &keys, term, None)).await;
        let w = self.finish(s).await;
        for (i, key) in keys.iter().enumerate() {
            let answer = match answers.as_ref().and_then(|a| a.get(i)) {
                Some(Ok(a)) => grant_answer(a.clone()),
                _ => Answer::Unknown,
            };
            let call = Call::Grant {
                holder: holder.clone(),
                term: ms,
            };
            self.record("begin_tenure_many", key, call, answer, w);
        }
    }

    /// `begin_tenure_all` on distinct keys (a key named twice refuses the whole request with
    /// a tenure it rolled back). A grant (or an unknown outcome) is one operation on all its
    /// keys, one group; a refusal is one on the key named (the others are unchanged, which
    /// constrains nothing).
    pub(super) async fn grant_all(&mut self) {
        let holder = self.holder();
        let (term, ms) = self.term();
        let mut keys = self.some_keys();
        keys.sort();
        keys.dedup();
        let h = HolderId::new(&holder).expect("holder");
        let s = self.start();
        let answer = bounded(self.session.store.begin_tenure_all(&h, &keys, term)).await;
        let w = self.finish(s).await;
        let call = Call::Grant { holder, term: ms };
        let via = "begin_tenure_all";
        let group = Some(self.joint());
        match answer {
            Some(AllOutcome::Acquired { tenures }) => {
                assert_eq!(tenures.len(), keys.len(), "one tenure per key");
                for (key, (token, until)) in keys.iter().zip(tenures) {
                    let answer = Answer::Acquired {
                        token: token.0,
                        end: until.0,
                    };
                    self.record_in(via, key, call.clone(), answer, w, group);
                }
            }
            Some(AllOutcome::HeldBy {
                key,
                holder,
                token,
                until,
            }) => {
                let answer = Answer::HeldBy {
                    holder: holder.as_str().to_owned(),
                    token: token.0,
                    end: until.0,
                };
                self.record(via, &key, call, answer, w);
            }
            _ => {
                for key in &keys {
                    self.record_in(via, key, call.clone(), Answer::Unknown, w, group);
                }
            }
        }
    }

    pub(super) async fn renew(&mut self) {
        let key = self.key();
        let (holder, token) = self.tenure(&key);
        let (term, ms) = self.term();
        let h = HolderId::new(&holder).expect("holder");
        let s = self.start();
        let answer = bounded(
            self.session
                .store
                .renew(&key, &h, FencingToken(token), term),
        )
        .await;
        let w = self.finish(s).await;
        let answer = match answer {
            Some(RenewOutcome::Renewed) => Answer::Renewed,
            Some(RenewOutcome::Lost) => Answer::Lost,
            None => Answer::Unknown,
        };
        let call = Call::Renew {
            holder,
            token,
            term: ms,
        };
        self.record("renew", &key, call, answer, w);
    }

    /// A holder's renewal of its latest short tenure (from a single grant of this session) that
    /// may come too late: once the tenure's end is at most 100 ms away, it waits until a
    /// moment from a little before the end to a little after, then renews, and asks for the
    /// lease again when the renewal was lost. Otherwise, or when the session has no such tenure,
    /// a plain renewal.
    pub(super) async fn renew_late(&mut self) {
        let due = self
            .mine
            .as_ref()
            .is_some_and(|m| m.3 - self.db_floor <= 100);
        if !due {
            return self.renew().await;
        }
        let Some((key, holder, token, end, ms)) = self.mine.take() else {
            return self.renew().await;
        };
        let wait = end - self.db_floor + self.rng.random_range(-30..60);
        let wait = u64::try_from(wait.clamp(0, 160)).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let h = HolderId::new(&holder).expect("holder");
        let term = leasehold_storage::Term::new(
            "term",
            Duration::from_millis(u64::try_from(ms).unwrap_or(1)),
        )
        .expect("term");
        let s = self.start();
        let answer = bounded(
            self.session
                .store
                .renew(&key, &h, FencingToken(token), term),
        )
        .await;
        let w = self.finish(s).await;
        let answer = match answer {
            Some(RenewOutcome::Renewed) => Answer::Renewed,
            Some(RenewOutcome::Lost) => Answer::Lost,
            None => Answer::Unknown,
        };
        let lost = answer == Answer::Lost;
        let call = Call::Renew {
            holder: holder.clone(),
            token,
            term: ms,
        };
        self.record("renew", &key, call, answer, w);
        if lost {
            // The holder asks for the lease again at once: the grant of a lapsed row, unless
            // another took it over first.
            self.grant_of(key, holder).await;
        }
    }

    /// The items of a batch of one holder: a tenure (maybe live) of each of some keys.
    fn items(&mut self) -> (String, Vec<TenureRef>) {
        let holder = self.holder();
        let mut items = Vec::new();
        for key in self.some_keys() {
            let (h, token) = self.tenure(&key);
            let token = if h == holder {
                token
            } else {
                self.rng.random_range(1..4)
            };
            items.push(TenureRef {
                key,
                token: FencingToken(token),
            });
        }
        if self.rng.random_bool(0.3) {
            // The same key again, with an older tenure's token.
            let i = self.rng.random_range(0..items.len());
            let mut again = items[i].clone();
            again.token = FencingToken(again.token.0 - 1);
            items.insert(self.rng.random_range(0..=items.len()), again);
        }
        (holder, items)
    }

    pub(super) async fn renew_batch(&mut self) {
        let (holder, items) = self.items();
        let (term, ms) = self.term();
        let h = HolderId::new(&holder).expect("holder");
        let many = self.rng.random_bool(0.4);
        let s = self.start();
        let answers: Option<Vec<Answer>> = if many {
            bounded(self.session.store.renew_many(&h, &items, term))
                .await
                .map(|v| {
                    v.into_iter()
                        .map(|r| {
                            if r {
                                Answer::Renewed
                            } else {
                                Answer::Unchanged
                            }
                        })
                        .collect()
                })
        } else {
            bounded(self.session.store.renew_batch(&h, &items, term))
                .await
                .map(|v| {
                    v.into_iter()
                        .map(|r| match r {
                            BatchRenewal::Renewed => Answer::Renewed,
                            BatchRenewal::Lost => Answer::Lost,
                            _ => Answer::Unchanged,
                        })
                        .collect()
                })
        };
        let w = self.finish(s).await;
        let via = if many { "renew_many" } else { "renew_batch" };
        for (i, it) in items.iter().enumerate() {
            let answer = answers
                .as_ref()
                .and_then(|a| a.get(i).cloned())
                .unwrap_or(Answer::Unknown);
            let call = Call::Renew {
                holder: holder.clone(),
                token: it.token.0,
                term: ms,
            };
            self.record(via, &it.key, call, answer, w);
        }
    }

    pub(super) async fn release(&mut self) {
        let key = self.key();
        let (holder, token) = self.tenure(&key);
        let h = HolderId::new(&holder).expect("holder");
        let s = self.start();
        let answer = bounded(self.session.store.release(&key, &h, FencingToken(token))).await;
        let w = self.finish(s).await;
        let answer = release_answer(answer);
        self.record("release", &key, Call::Release { holder, token }, answer, w);
    }

    pub(super) async fn release_batch(&mut self) {
        let (holder, items) = self.items();
        let h = HolderId::new(&holder).expect("holder");
        let s = self.start();
        let answers = bounded(self.session.store.release_batch(&h, &items)).await;
        let w = self.finish(s).await;
        for (i, it) in items.iter().enumerate() {
            let answer = match answers.as_ref().and_then(|a| a.get(i)) {
                Some(Ok(a)) => release_answer(Some(*a)),
                _ => Answer::Unknown,
            };
            let call = Call::Release {
                holder: holder.clone(),
                token: it.token.0,
            };
            self.record("release_batch", &it.key, call, answer, w);
        }
    }

    pub(super) async fn purge(&mut self) {
        let ns = leasehold_storage::Namespace::new(&self.plan.namespace).expect("namespace");
        let s = self.start();
        let answer = bounded(self.session.store.purge(Some(&ns), Duration::ZERO)).await;
        let w = self.finish(s).await;
        let answer = answer.map_or(Answer::Unknown, |_| Answer::Done);
        let known = answer != Answer::Unknown;
        self.rec.push(Op {
            session: self.id,
            via: "purge",
            key: EVERY_KEY.to_owned(),
            call: Call::Purge,
            answer,
            invoke: w.invoke,
            respond: known.then_some(w.respond),
            db: if known {
                w.db
            } else {
                DbWindow::new(w.db.lo, i64::MAX)
            },
            group: None,
        });
    }
}

//! The lease-store calls of a session, each recorded per key with its window and answer (a
//! batch as one operation per item, a failed or timed-out call as an unknown outcome).

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, AllOutcome, BatchRenewal, FencingToken, Grant, HolderId, ReleaseOutcome,
    RenewOutcome, TenureRef,
};
use leasehold_testkit::history::{Answer, Call, EVERY_KEY, Op};
use rand::RngExt;

use super::{Worker, bounded, term};

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
        let h = HolderId::new(&holder).expect("holder");
        let t0 = self.rec.now();
        let answer = bounded(
            self.session
                .store
                .begin_tenure(&key, &h, Grant::New, term(), None),
        )
        .await;
        let t1 = self.rec.now();
        let answer = answer.map_or(Answer::Unknown, grant_answer);
        self.record(
            "begin_tenure",
            &key,
            Call::Grant { holder },
            answer,
            (t0, t1),
        );
    }

    pub(super) async fn grant_many(&mut self) {
        let (keys, holder) = (self.some_keys(), self.holder());
        let h = HolderId::new(&holder).expect("holder");
        let t0 = self.rec.now();
        let answers = bounded(
            self.session
                .store
                .begin_tenure_many(&h, &keys, term(), None),
        )
        .await;
        let t1 = self.rec.now();
        for (i, key) in keys.iter().enumerate() {
            let answer = match answers.as_ref().and_then(|a| a.get(i)) {
                Some(Ok(a)) => grant_answer(a.clone()),
                _ => Answer::Unknown,
            };
            let call = Call::Grant {
                holder: holder.clone(),
            };
            self.record("begin_tenure_many", key, call, answer, (t0, t1));
        }
    }

    /// `begin_tenure_all` on distinct keys (a key named twice refuses the whole request with
    /// a tenure it rolled back). Each key of a grant is one operation; of a refusal, only the key
    /// named (the others are unchanged, which constrains nothing).
    pub(super) async fn grant_all(&mut self) {
        let holder = self.holder();
        let mut keys = self.some_keys();
        keys.sort();
        keys.dedup();
        let h = HolderId::new(&holder).expect("holder");
        let t0 = self.rec.now();
        let answer = bounded(self.session.store.begin_tenure_all(&h, &keys, term())).await;
        let t1 = self.rec.now();
        let call = Call::Grant { holder };
        let via = "begin_tenure_all";
        match answer {
            Some(AllOutcome::Acquired { tenures }) => {
                assert_eq!(tenures.len(), keys.len(), "one tenure per key");
                for (key, (token, until)) in keys.iter().zip(tenures) {
                    let answer = Answer::Acquired {
                        token: token.0,
                        end: until.0,
                    };
                    self.record(via, key, call.clone(), answer, (t0, t1));
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
                self.record(via, &key, call, answer, (t0, t1));
            }
            _ => {
                for key in &keys {
                    self.record(via, key, call.clone(), Answer::Unknown, (t0, t1));
                }
            }
        }
    }

    pub(super) async fn renew(&mut self) {
        let key = self.key();
        let (holder, token) = self.tenure(&key);
        let h = HolderId::new(&holder).expect("holder");
        let t0 = self.rec.now();
        let answer = bounded(
            self.session
                .store
                .renew(&key, &h, FencingToken(token), term()),
        )
        .await;
        let t1 = self.rec.now();
        let answer = match answer {
            Some(RenewOutcome::Renewed) => Answer::Renewed,
            Some(RenewOutcome::Lost) => Answer::Lost,
            None => Answer::Unknown,
        };
        self.record(
            "renew",
            &key,
            Call::Renew { holder, token },
            answer,
            (t0, t1),
        );
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
        if super::repeats() && self.rng.random_bool(0.3) {
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
        let h = HolderId::new(&holder).expect("holder");
        let many = self.rng.random_bool(0.4);
        let t0 = self.rec.now();
        let answers: Option<Vec<Answer>> = if many {
            bounded(self.session.store.renew_many(&h, &items, term()))
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
            bounded(self.session.store.renew_batch(&h, &items, term()))
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
        let t1 = self.rec.now();
        let via = if many { "renew_many" } else { "renew_batch" };
        for (i, it) in items.iter().enumerate() {
            let answer = answers
                .as_ref()
                .and_then(|a| a.get(i).cloned())
                .unwrap_or(Answer::Unknown);
            let call = Call::Renew {
                holder: holder.clone(),
                token: it.token.0,
            };
            self.record(via, &it.key, call, answer, (t0, t1));
        }
    }

    pub(super) async fn release(&mut self) {
        let key = self.key();
        let (holder, token) = self.tenure(&key);
        let h = HolderId::new(&holder).expect("holder");
        let t0 = self.rec.now();
        let answer = bounded(self.session.store.release(&key, &h, FencingToken(token))).await;
        let t1 = self.rec.now();
        let answer = release_answer(answer);
        self.record(
            "release",
            &key,
            Call::Release { holder, token },
            answer,
            (t0, t1),
        );
    }

    pub(super) async fn release_batch(&mut self) {
        let (holder, items) = self.items();
        let h = HolderId::new(&holder).expect("holder");
        let t0 = self.rec.now();
        let answers = bounded(self.session.store.release_batch(&h, &items)).await;
        let t1 = self.rec.now();
        for (i, it) in items.iter().enumerate() {
            let answer = match answers.as_ref().and_then(|a| a.get(i)) {
                Some(Ok(a)) => release_answer(Some(*a)),
                _ => Answer::Unknown,
            };
            let call = Call::Release {
                holder: holder.clone(),
                token: it.token.0,
            };
            self.record("release_batch", &it.key, call, answer, (t0, t1));
        }
    }

    pub(super) async fn purge(&mut self) {
        let ns = leasehold_storage::Namespace::new(&self.plan.namespace).expect("namespace");
        let t0 = self.rec.now();
        let answer = bounded(self.session.store.purge(Some(&ns), Duration::ZERO)).await;
        let t1 = self.rec.now();
        let answer = answer.map_or(Answer::Unknown, |_| Answer::Done);
        let respond = (answer != Answer::Unknown).then_some(t1);
        self.rec.push(Op {
            session: self.id,
            via: "purge",
            key: EVERY_KEY.to_owned(),
            call: Call::Purge,
            answer,
            invoke: t0,
            respond,
        });
    }
}

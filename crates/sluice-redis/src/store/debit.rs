//! Debits: a cost charged whatever a limit has left, into debt (the
//! script's debit mode), as sluice-core's [`Limiter::debit`] charges it.
//!
//! [`Limiter::debit`]: sluice_core::Limiter::debit

use sluice_core::Debited;

use super::key::{hash_tag, tagged_key_name};
use super::request::Prepared;
use super::{RedisCheck, RedisStore};
use crate::RedisStoreError;
use crate::script::ScriptCheck;

impl RedisStore {
    /// Charges `check.cost` to `check.key` of `check.limiter` whatever the
    /// limit has left, in one atomic script step on Redis's clock: what is
    /// left is used first, the rest puts the key into debt, up to
    /// `max_debt` units of cost beyond empty; what would pass that is not
    /// charged but answered as [`Debited::excess`]. Exactly
    /// [`Limiter::debit`](sluice_core::Limiter::debit), forgiveness of debt
    /// ([`Limiter::with_debt_forgiven`](sluice_core::Limiter::with_debt_forgiven))
    /// included. The reserve is ignored. A key in debt is refused by every
    /// check until its debt is paid off, and its Redis key lives until then.
    ///
    /// A sliding log whose window is not a whole number of microseconds
    /// cannot hold debt here: [`RedisStoreError::DebitUnsupported`], and
    /// nothing changes.
    pub async fn debit(
        &self,
        check: &RedisCheck<'_>,
        max_debt: u64,
    ) -> Result<Debited, RedisStoreError> {
        self.charge_debt(&Prepared::from(check), max_debt, None)
            .await
    }

    /// [`debit`](Self::debit) of a check whose parameters are already
    /// computed (a registered counter's).
    pub(crate) async fn debit_prepared(
        &self,
        check: &Prepared<'_>,
        max_debt: u64,
    ) -> Result<Debited, RedisStoreError> {
        self.charge_debt(check, max_debt, None).await
    }

    /// [`debit`](Self::debit) at a given time, in microseconds, instead of
    /// Redis's clock. For conformance tests only.
    #[doc(hidden)]
    pub async fn debit_at(
        &self,
        check: &RedisCheck<'_>,
        max_debt: u64,
        now_us: u64,
    ) -> Result<Debited, RedisStoreError> {
        self.charge_debt(&Prepared::from(check), max_debt, Some(now_us))
            .await
    }

    async fn charge_debt(
        &self,
        c: &Prepared<'_>,
        max_debt: u64,
        now_us: Option<u64>,
    ) -> Result<Debited, RedisStoreError> {
        let params = c.params.ok_or_else(|| {
            RedisStoreError::BadReply(format!(
                "cannot read the parameters of limit `{}`",
                c.limit_id
            ))
        })?;
        if !params.can_debit() {
            return Err(RedisStoreError::DebitUnsupported(c.limit_id.to_owned()));
        }
        let amount = c.cost;
        if amount == 0 {
            return Ok(Debited::default());
        }
        let key = tagged_key_name(c.tag, c.key);
        let tag = hash_tag(&key).to_owned();
        let check = ScriptCheck {
            key,
            params,
            cost: amount,
        };
        let mut conn = self.conn(&tag);
        let charged = self
            .inner
            .script
            .debit(&mut conn, &[check], max_debt, now_us)
            .await?;
        let charged = charged.first().copied().unwrap_or(0);
        Ok(Debited {
            charged,
            excess: amount - charged,
        })
    }
}

-- Settlement in another currency. Stripe books a charge presented in one
-- currency (eur) in the account's balance in another (usd), converted at a
-- rate it reports on the balance transaction (exchange_rate). The ledger
-- records the conversion as two transactions, one per currency, through the
-- fx_clearing account: the presentment amount leaves provider_balance in
-- eur, the settlement amount enters it in usd, and each balances in its own
-- currency. exchange_rate keeps Stripe's rate on both legs.

ALTER TABLE ledger_transactions ADD COLUMN exchange_rate numeric;
ALTER TABLE ledger_transactions ADD CONSTRAINT ledger_transactions_exchange_rate_check
    CHECK (exchange_rate IS NULL OR exchange_rate > 0);

ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_account_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_account_check CHECK (account IN (
    'provider_balance', 'payouts_in_transit', 'bank',
    'sales', 'refunds', 'dispute_losses', 'fees', 'fx_clearing'));

-- A reconciliation item of a movement that settled in another currency
-- shows the presentment side and the rate next to the settlement amounts.
ALTER TABLE reconciliation_items ADD COLUMN presentment_currency text;
ALTER TABLE reconciliation_items ADD COLUMN presentment_amount numeric;
ALTER TABLE reconciliation_items ADD COLUMN exchange_rate numeric;

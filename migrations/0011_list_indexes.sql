-- GET /v1/payments pages newest first by created_at (it never moves, unlike
-- updated_at, so a keyset cursor neither skips nor repeats a payment that
-- changes while a client pages), alone or filtered by status or currency.
CREATE INDEX payments_created_at_idx ON payments (created_at DESC, id DESC);
CREATE INDEX payments_status_created_at_idx ON payments (status, created_at DESC, id DESC);
CREATE INDEX payments_currency_created_at_idx ON payments (currency, created_at DESC, id DESC);

-- GET /v1/events pages every event newest first; with a status it uses the
-- indexes of 0001 and 0004, and payment_id goes through the payment tables'
-- payment_id indexes to the inbox's unique key. A provider filter reads this
-- one too: there are a handful of providers, and every index here is paid
-- for on the ingest path.
CREATE INDEX inbox_events_received_at_idx ON inbox_events (received_at DESC, id DESC);

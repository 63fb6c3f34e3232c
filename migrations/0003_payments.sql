-- Payments: a projection of the facts providers reported about each
-- payment. payment_facts is the set the state is folded from (unique per
-- fact key, so a duplicate report adds nothing); payments holds the fold's
-- result for reading; payment_history records each change of state for
-- display. The ledger, not these tables, holds the money.

CREATE TABLE payments (
    id               text        PRIMARY KEY,
    provider         text        NOT NULL,
    status           text        NOT NULL DEFAULT 'processing',
    currency         text        NOT NULL DEFAULT '',
    amount           numeric     NOT NULL DEFAULT 0,
    amount_captured  numeric     NOT NULL DEFAULT 0,
    amount_refunded  numeric     NOT NULL DEFAULT 0,
    amount_disputed  numeric     NOT NULL DEFAULT 0,
    receipt_email    text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE payment_facts (
    payment_id   text        NOT NULL REFERENCES payments (id),
    key          text        NOT NULL,
    kind         text        NOT NULL,
    object_id    text        NOT NULL DEFAULT '',
    amount       numeric     NOT NULL DEFAULT 0,
    currency     text        NOT NULL DEFAULT '',
    event_id     text        NOT NULL,
    occurred_at  timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payment_facts_pkey PRIMARY KEY (payment_id, key)
);

CREATE TABLE payment_history (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id   text        NOT NULL REFERENCES payments (id),
    from_status  text,
    to_status    text        NOT NULL,
    event_id     text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX payment_history_payment_id_idx ON payment_history (payment_id, id);

-- The merchant's own words about a payment: the order reference, the
-- customer, the description and the metadata the provider's events carry.
-- Each is null ({} for metadata) until an event carries it; details_stamps
-- records, per field, the (provider's created, event id) of the event its
-- value came from, so that the newest carrying event wins in any arrival
-- order.
ALTER TABLE payments
    ADD COLUMN reference      text,
    ADD COLUMN customer       text,
    ADD COLUMN description    text,
    ADD COLUMN metadata       jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN details_stamps jsonb NOT NULL DEFAULT '{}';

-- Finding a payment by what the merchant knows it by. Partial: most
-- payments of a busy account have a reference, but a lookup never wants the
-- ones without.
CREATE INDEX payments_reference_idx ON payments (reference, created_at DESC, id DESC) WHERE reference IS NOT NULL;
CREATE INDEX payments_customer_idx ON payments (customer, created_at DESC, id DESC) WHERE customer IS NOT NULL;
CREATE INDEX payments_receipt_email_idx ON payments (lower(receipt_email), created_at DESC, id DESC)
    WHERE receipt_email IS NOT NULL AND receipt_email <> '';

-- Double charges: one row per reference that was ever paid twice over.
-- state is open (two or more of its payments are net captured), resolved
-- (a refund left at most one) or dismissed (ops said the order was meant to
-- be paid in parts). detections counts the times it opened: each opening is
-- one detection, with one email to ops.
CREATE TABLE double_charges (
    reference    text        PRIMARY KEY,
    state        text        NOT NULL,
    detections   integer     NOT NULL DEFAULT 1,
    detected_at  timestamptz NOT NULL,
    resolved_at  timestamptz,
    dismissed_by text,
    note         text,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT double_charges_state_check CHECK (state IN ('open', 'resolved', 'dismissed')),
    CONSTRAINT double_charges_dismissed_check CHECK ((state = 'dismissed') = (dismissed_by IS NOT NULL))
);
CREATE INDEX double_charges_state_idx ON double_charges (state, detected_at DESC, reference);

-- The fill of payments written before this migration: how far it got, so a
-- restarted fill goes on from there. One row; done once it reached the end.
CREATE TABLE payment_details_fill (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    after_id    text        NOT NULL DEFAULT '',
    filled      bigint      NOT NULL DEFAULT 0,
    done        boolean     NOT NULL DEFAULT false,
    started_at  timestamptz,
    finished_at timestamptz
);
INSERT INTO payment_details_fill (done) SELECT NOT EXISTS (SELECT FROM payments);

ALTER TABLE email_outbox DROP CONSTRAINT email_outbox_kind_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_check
    CHECK (kind IN ('payment_receipt', 'refund_confirmation', 'dispute_alert', 'poison_alert', 'refund_failed_alert',
                    'reconciliation_alert', 'endpoint_disabled', 'nats_unavailable', 'double_charge'));

ALTER TABLE ops_audit_log DROP CONSTRAINT ops_audit_log_action_check;
ALTER TABLE ops_audit_log ADD CONSTRAINT ops_audit_log_action_check
    CHECK (action IN ('replay', 'bulk_replay', 'discard', 'sweep', 'refund_request', 'refund_failed',
                      'reconciliation_resolve', 'period_close', 'double_charge_dismiss'));

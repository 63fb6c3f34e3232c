-- Refunds paygate starts itself (POST /v1/payments/{id}/refunds): a saga
-- whose every step commits here. A request is inserted under its payment's
-- row lock with its submit_refund job, so two requests can never both
-- reserve the same money; the job calls the provider with a key derived
-- from the id; the provider's reports settle it. The ledger holds the
-- money: a request is intent and outcome, never a posting.
CREATE TABLE refund_requests (
    id                 text        PRIMARY KEY,
    payment_id         text        NOT NULL REFERENCES payments (id),
    provider           text        NOT NULL,
    amount             numeric     NOT NULL,
    currency           text        NOT NULL,
    reason             text,
    note               text,
    state              text        NOT NULL DEFAULT 'requested',
    provider_refund_id text,
    failure_reason     text,
    actor              text        NOT NULL,
    idempotency_key    text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    submitted_at       timestamptz,
    CONSTRAINT refund_requests_amount_check CHECK (amount > 0),
    CONSTRAINT refund_requests_currency_check CHECK (currency ~ '^[a-z]{3}$'),
    CONSTRAINT refund_requests_reason_check
        CHECK (reason IN ('duplicate', 'fraudulent', 'requested_by_customer')),
    CONSTRAINT refund_requests_state_check
        CHECK (state IN ('requested', 'submitted', 'succeeded', 'failed')),
    CONSTRAINT refund_requests_actor_check CHECK (btrim(actor) <> ''),
    -- One provider refund settles one request.
    CONSTRAINT refund_requests_provider_refund_id_key UNIQUE (provider, provider_refund_id),
    CONSTRAINT refund_requests_failure_check CHECK (state <> 'failed' OR failure_reason IS NOT NULL)
);

CREATE INDEX refund_requests_payment_id_idx ON refund_requests (payment_id, created_at, id);
-- The reservations: what requests not yet settled hold of their payment.
CREATE INDEX refund_requests_open_idx ON refund_requests (payment_id)
    WHERE state IN ('requested', 'submitted');

-- The audit log records who asked for a refund, and every refund that
-- failed (by the provider's refusal or report, or past the provider's key
-- window), with the request's id in event_id.
ALTER TABLE ops_audit_log DROP CONSTRAINT ops_audit_log_action_check;
ALTER TABLE ops_audit_log ADD CONSTRAINT ops_audit_log_action_check
    CHECK (action IN ('replay', 'bulk_replay', 'discard', 'sweep', 'refund_request', 'refund_failed'));

-- Ops learn of every failed refund request by email, once per request.
ALTER TABLE email_outbox DROP CONSTRAINT email_outbox_kind_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_check
    CHECK (kind IN ('payment_receipt', 'refund_confirmation', 'dispute_alert', 'poison_alert', 'refund_failed_alert'));

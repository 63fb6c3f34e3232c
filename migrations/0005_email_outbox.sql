-- The email outbox: one row per email intent, written in the same
-- transaction as the state change that calls for it, together with its
-- send_email job. (kind, object_id) is the intent's key: the database
-- decides which copy of a duplicated or reordered event asks first, so an
-- intent can never enqueue a second email.
--
-- object_id is the payment id (payment_receipt), the refund id
-- (refund_confirmation), the dispute id (dispute_alert) or
-- "<provider>/<event_id>" (poison_alert). payment_id lists a payment's
-- emails. data holds what the templates need; amounts in it are decimal
-- strings in major units ("360.00") with a lowercase currency, never floats.
--
-- status: pending (a send_email job is on its way), sent, skipped (no
-- recipient, or no SMTP server configured: last_error says which) or
-- failed (rejected permanently, or out of attempts: last_error says why).
-- message_id is the Message-ID every attempt uses, derived from the key.
CREATE TABLE email_outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text        NOT NULL,
    object_id   text        NOT NULL,
    payment_id  text,
    recipient   text,
    data        jsonb       NOT NULL DEFAULT '{}',
    status      text        NOT NULL DEFAULT 'pending',
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    message_id  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz,
    CONSTRAINT email_outbox_kind_object_id_key UNIQUE (kind, object_id),
    CONSTRAINT email_outbox_kind_check
        CHECK (kind IN ('payment_receipt', 'refund_confirmation', 'dispute_alert', 'poison_alert')),
    CONSTRAINT email_outbox_status_check
        CHECK (status IN ('pending', 'sent', 'skipped', 'failed')),
    CONSTRAINT email_outbox_sent_at_check
        CHECK ((status = 'sent') = (sent_at IS NOT NULL)),
    CONSTRAINT email_outbox_recipient_check
        CHECK (status = 'skipped' OR recipient IS NOT NULL)
);

CREATE INDEX email_outbox_payment_id_idx ON email_outbox (payment_id, created_at, id)
    WHERE payment_id IS NOT NULL;
CREATE INDEX email_outbox_unsent_idx ON email_outbox (status, created_at)
    WHERE status IN ('pending', 'failed');

-- The missed-event sweep: every few minutes paygate lists the events a
-- provider created (Stripe's events list) and ingests through the inbox
-- those it lacks, whose webhooks never arrived.

-- How an event reached paygate: delivered to its webhook endpoint, or read
-- from the provider's API (the sweep, reconciliation's recovery), which no
-- signature covers. Every row before this migration was a webhook's; the
-- constant default rewrites no partition, and the check, which every such
-- row meets, is left NOT VALID rather than scan the whole inbox under the
-- lock this statement holds.
ALTER TABLE inbox_events ADD COLUMN source text NOT NULL DEFAULT 'webhook';
ALTER TABLE inbox_events ADD CONSTRAINT inbox_events_source_check CHECK (source IN ('webhook', 'api')) NOT VALID;

-- One row per provider swept. swept_until is the end of the last window
-- swept to its end: the next sweep starts an overlap before it. A window
-- under way (window_from, window_to) keeps its place, cursor (the last
-- listed event of the last page whose events are committed), and its
-- findings so far, so that a sweep cut off by a failing API or a restart
-- goes on from there; its place is written only after what it fetched
-- committed. The last_* columns are the last finished sweep, as ops see it.
-- failing_since is the first failure since the last success (NULL while
-- the API answers); alerted_at is set once its sweep_failing email is
-- queued, so that an outage sends one.
CREATE TABLE event_sweeps (
    provider          text        PRIMARY KEY,
    swept_until       timestamptz,
    window_from       timestamptz,
    window_to         timestamptz,
    cursor            text,
    window_started_at timestamptz,
    window_new        integer     NOT NULL DEFAULT 0,
    window_known      integer     NOT NULL DEFAULT 0,
    window_first      jsonb,
    window_last       jsonb,
    last_from         timestamptz,
    last_to           timestamptz,
    last_started_at   timestamptz,
    last_finished_at  timestamptz,
    last_new          integer,
    last_known        integer,
    last_first        jsonb,
    last_last         jsonb,
    failing_since     timestamptz,
    last_error        text,
    alerted_at        timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT event_sweeps_window_check CHECK ((window_from IS NULL) = (window_to IS NULL) AND (window_from IS NULL OR window_from < window_to))
);

ALTER TABLE email_outbox DROP CONSTRAINT email_outbox_kind_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_check
    CHECK (kind IN ('payment_receipt', 'refund_confirmation', 'dispute_alert', 'poison_alert', 'refund_failed_alert',
                    'reconciliation_alert', 'endpoint_disabled', 'nats_unavailable', 'double_charge',
                    'missed_events', 'sweep_failing'));

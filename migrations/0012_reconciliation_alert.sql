-- Finance is told once per reconciliation run that failed or completed with
-- exceptions (object_id: the run's id), enqueued with the run's outcome.
ALTER TABLE email_outbox DROP CONSTRAINT email_outbox_kind_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_check
    CHECK (kind IN ('payment_receipt', 'refund_confirmation', 'dispute_alert', 'poison_alert', 'refund_failed_alert',
                    'reconciliation_alert'));

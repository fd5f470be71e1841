"""Provider feedback from the world's own formats: Postmark's and SendGrid's webhooks, RFC 3464 bounce reports.

Each module reads one format into ``domain.feedback.Feedback`` reports that
name their email (``infra.services.feedback.MessageRef``), after checking the
sender's credentials or signature; ``infra.services.feedback`` records them.
"""

"""The demo data set behind `manage.py demo`: what it creates, and the local file of its keys."""

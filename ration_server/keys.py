"""`ration keys create|list|rotate|revoke`: issued API keys of a running budget service."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from decimal import Decimal

from ration_client import BudgetClient, Policy, Window
from ration_client.keys import ApiKey

ROLE_CHOICES = ("reader", "writer", "admin", "approver")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget",
        help="budget service address (default: RATION_BUDGET_ADDRESS, else 127.0.0.1:50051)",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="mint a key; its secret is printed once")
    create.add_argument(
        "--role",
        dest="roles",
        action="append",
        choices=ROLE_CHOICES,
        required=True,
        help="a role of the key (repeat for more)",
    )
    create.add_argument("--principal", default="", help="who the key's caller is (default: id)")
    create.add_argument("--max-tokens", type=int, help="the key's pool: tokens per window")
    create.add_argument("--max-cost-usd", type=Decimal, help="the key's pool: USD per window")
    create.add_argument(
        "--window",
        choices=[w.value for w in Window],
        default=Window.NONE.value,
        help="the pool's calendar window (UTC; default none)",
    )
    listing = actions.add_parser("list", help="the tenant's keys (never their secrets)")
    listing.add_argument("--all", action="store_true", help="also revoked keys")
    rotate = actions.add_parser("rotate", help="a new secret; the old one lasts --overlap")
    rotate.add_argument("key_id")
    rotate.add_argument("--overlap", type=int, default=0, help="seconds the old secret lasts")
    revoke = actions.add_parser("revoke", help="refused on every replica within 5 s")
    revoke.add_argument("key_id")


def _line(key: ApiKey) -> str:
    state = "revoked" if key.revoked_at is not None else "active"
    pool = " budget" if key.has_budget else ""
    return f"{key.key_id}  {','.join(key.roles)}  {key.principal}  {state}{pool}"


async def run_keys(
    args: argparse.Namespace, *, token: str | None, say: Callable[[str], None] = print
) -> None:
    async with BudgetClient(args.budget, token=token) as budget:
        if args.action == "create":
            limits = args.max_tokens is not None or args.max_cost_usd is not None
            policy = Policy(max_tokens=args.max_tokens, max_cost=args.max_cost_usd)
            minted = await budget.create_api_key(
                args.roles,
                principal=args.principal,
                budget_policy=policy if limits else None,
                budget_window=Window(args.window),
            )
            say(_line(minted.key))
            say(f"secret (shown once): {minted.secret}")
        elif args.action == "list":
            for key in await budget.list_all_api_keys(include_revoked=args.all):
                say(_line(key))
        elif args.action == "rotate":
            minted = await budget.rotate_api_key(args.key_id, overlap_seconds=args.overlap)
            until = minted.previous_valid_until
            say(_line(minted.key))
            say(f"secret (shown once): {minted.secret}")
            say(f"previous secret valid until {until.isoformat() if until else 'now'}")
        else:
            say(_line(await budget.revoke_api_key(args.key_id)))

"""Invitation and password-reset links: admins issue and revoke them; whoever holds one uses it once."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status
from sqlalchemy.orm import Session

from server.auth import AdminUser
from server.deps import MAX_ID, SessionDep, SettingsDep
from server.errors import NotFound
from server.models import Invitation, User
from server.schemas import (
    ErrorOut,
    InvitationAccept,
    InvitationCreate,
    InvitationInfo,
    InvitationIssued,
    InvitationOut,
    InvitationToken,
    UserOut,
)
from server.services import accounts

router = APIRouter(tags=["invitations"])
InvitationId = Annotated[int, Path(ge=1, le=MAX_ID)]
UserId = Annotated[int, Path(ge=1, le=MAX_ID)]
ADMIN_ONLY = {401: {"model": ErrorOut}, 403: {"model": ErrorOut}}


def _out(session: Session, invitations: list[Invitation]) -> list[InvitationOut]:
    ids = {i.user_id for i in invitations} | {i.created_by for i in invitations}
    names = accounts.usernames(session, {i for i in ids if i is not None})
    return [
        InvitationOut(
            id=i.id,
            purpose=i.purpose,
            role=i.role,
            username=names.get(i.user_id) if i.user_id else None,
            created_by_name=names.get(i.created_by) if i.created_by else None,
            created_at=i.created_at,
            expires_at=i.expires_at,
        )
        for i in invitations
    ]


def _issued(session: Session, invitation: Invitation, token: str) -> InvitationIssued:
    return InvitationIssued(**_out(session, [invitation])[0].model_dump(), token=token)


@router.post("/api/invitations", status_code=status.HTTP_201_CREATED, responses=ADMIN_ONLY)
def create_invitation(
    body: InvitationCreate, admin: AdminUser, session: SessionDep, settings: SettingsDep
) -> InvitationIssued:
    """A single-use link (`invitation_hours` long) with which someone chooses a username and password
    and becomes an account with `role`. The token is in this answer only."""
    invitation, token = accounts.issue_invitation(
        session, by=admin.user, role=body.role, hours=settings.invitation_hours
    )
    session.commit()
    return _issued(session, invitation, token)


@router.get("/api/invitations", responses=ADMIN_ONLY)
def list_invitations(_admin: AdminUser, session: SessionDep) -> list[InvitationOut]:
    """Links not used yet and not expired: invitations and password resets."""
    return _out(session, accounts.open_invitations(session))


@router.delete(
    "/api/invitations/{invitation_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={**ADMIN_ONLY, 404: {"model": ErrorOut}},
)
def revoke_invitation(invitation_id: InvitationId, _admin: AdminUser, session: SessionDep) -> None:
    accounts.revoke_invitation(session, invitation_id)
    session.commit()


@router.post(
    "/api/users/{user_id}/reset-link",
    status_code=status.HTTP_201_CREATED,
    tags=["users"],
    responses={**ADMIN_ONLY, 404: {"model": ErrorOut}},
)
def create_reset_link(
    user_id: UserId, admin: AdminUser, session: SessionDep, settings: SettingsDep
) -> InvitationIssued:
    """A single-use link that sets a new password for the user (who has forgotten theirs); their
    sessions end when it is used. An earlier unused reset link for them stops working."""
    user = session.get(User, user_id)
    if user is None:
        raise NotFound(f"user {user_id} not found")
    hours = settings.invitation_hours
    invitation, token = accounts.issue_reset(session, by=admin.user, user=user, hours=hours)
    session.commit()
    return _issued(session, invitation, token)


@router.post("/api/invitations/inspect", responses={404: {"model": ErrorOut}})
def inspect_invitation(body: InvitationToken, session: SessionDep) -> InvitationInfo:
    """What a link is for (no login needed: the token is the credential)."""
    invitation = accounts.usable_invitation(session, body.token)
    username = session.get_one(User, invitation.user_id).username if invitation.user_id else None
    return InvitationInfo(purpose=invitation.purpose, username=username, expires_at=invitation.expires_at)


@router.post(
    "/api/invitations/accept",
    responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)
def accept_invitation(body: InvitationAccept, session: SessionDep) -> UserOut:
    """Use a link once: an invitation makes the account `username` with `password`, a reset sets
    the password of the account it is for and ends that account's sessions. Then log in."""
    user = accounts.accept_invitation(session, body.token, username=body.username, password=body.password)
    session.commit()
    return UserOut.model_validate(user)

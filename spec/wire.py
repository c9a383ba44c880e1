"""A structural check of protobuf wire bytes that reports *where* they are broken.

The protobuf runtime says only "Error parsing message".  Users of ``txnmodel inspect`` and of the
ledger readers need the byte offset, so before parsing we walk the bytes against the message's
descriptor: every tag, varint, length and nested message, and the proto2 ``required`` fields.  The
walk raises :class:`spec.errors.TruncatedInput` or :class:`spec.errors.BadRecord` with the absolute
offset of the first problem; bytes that pass are then parsed by the runtime.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from spec.errors import BadRecord, TruncatedInput

__all__ = ["check_message"]

_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5
_MAX_FIELD_NUMBER = (1 << 29) - 1

_EXPECTED_WIRE_TYPE: dict[int, int] = {}
for _t in (
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_ENUM,
):
    _EXPECTED_WIRE_TYPE[_t] = _VARINT
for _t in (FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64, FieldDescriptor.TYPE_DOUBLE):
    _EXPECTED_WIRE_TYPE[_t] = _I64
for _t in (FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_FLOAT):
    _EXPECTED_WIRE_TYPE[_t] = _I32
for _t in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_MESSAGE):
    _EXPECTED_WIRE_TYPE[_t] = _LEN


def _read_varint(data: bytes, pos: int, end: int, what: str, base: int = 0) -> tuple[int, int]:
    start = pos
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise TruncatedInput(f"{what}: varint runs past the end", offset=base + start)
        byte = data[pos]
        pos += 1
        if shift == 63 and byte > 1:
            # The runtime would silently drop the bits above 64; the bytes say something else.
            raise BadRecord(f"{what}: varint does not fit in 64 bits", offset=base + start)
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise BadRecord(f"{what}: varint longer than 10 bytes", offset=base + start)


def _check_enum(field: Any, value: int, what: str, offset: int) -> None:
    """A closed (proto2) enum holds one of its declared numbers.

    The runtime would move any other number to the unknown fields, and the record would then read
    as if the field were absent: a silent misreading, so it is an error here.
    """
    if field.type != FieldDescriptor.TYPE_ENUM or not getattr(field.enum_type, "is_closed", True):
        return
    signed = value - (1 << 64) if value >= 1 << 63 else value
    if signed not in field.enum_type.values_by_number:
        raise BadRecord(f"{what}: {signed} is not a value of {field.enum_type.full_name}", offset=offset)


def _check_packed(data: bytes, start: int, stop: int, wire: int | None, what: str, base: int, field: Any) -> None:
    """The body of a packed repeated scalar: whole varints, or a multiple of the fixed width."""
    if wire == _VARINT:
        pos = start
        while pos < stop:
            value_at = pos
            value, pos = _read_varint(data, pos, stop, f"{what} (packed)", base)
            _check_enum(field, value, what, base + value_at)
        return
    width = 8 if wire == _I64 else 4
    if (stop - start) % width:
        raise BadRecord(f"{what}: packed length {stop - start} is not a multiple of {width}", offset=base + start)


def _field_what(name: str, field: Any, number: int) -> str:
    """How the messages name a field: ``Message.field``, or ``Message.number`` for an unknown one."""
    return f"{name}.{field.name if field else number}"


def check_message(data: bytes, descriptor: Any, *, base: int = 0, start: int = 0, end: int | None = None) -> None:
    """Check ``data[start:end]`` is a well-formed encoding of ``descriptor``.

    ``base`` is added to every reported offset, so callers that strip a prefix still report
    offsets into the bytes the user holds.
    """
    stop = len(data) if end is None else end
    name = descriptor.full_name
    fields = descriptor.fields_by_number
    seen: set[int] = set()
    pos = start
    # A one-byte varint (most tags, lengths and values) is read in place, and a field's name for
    # the messages is spelled only where one is needed: every record replayed passes through here.
    while pos < stop:
        tag_at = pos
        tag = data[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_varint(data, pos, stop, f"{name} tag", base)
        number, wire = tag >> 3, tag & 7
        if number == 0 or number > _MAX_FIELD_NUMBER:
            raise BadRecord(f"{name}: field number {number} is invalid", offset=base + tag_at)
        if wire in (_SGROUP, _EGROUP) or wire > 5:
            raise BadRecord(f"{name}: invalid wire type {wire} for field {number}", offset=base + tag_at)
        field = fields.get(number)
        expected = _EXPECTED_WIRE_TYPE.get(field.type) if field is not None else None
        if field is not None and expected != wire:
            packed_ok = wire == _LEN and field.is_repeated and expected in (_VARINT, _I64, _I32)
            if not packed_ok:
                raise BadRecord(f"{name}.{field.name}: wire type {wire}, expected {expected}", offset=base + tag_at)
        if wire == _VARINT:
            value_at = pos
            if pos < stop and data[pos] < 0x80:
                value = data[pos]
                pos += 1
            else:
                value, pos = _read_varint(data, pos, stop, _field_what(name, field, number), base)
            if field is not None and field.type == FieldDescriptor.TYPE_ENUM:
                _check_enum(field, value, _field_what(name, field, number), base + value_at)
        elif wire == _I64:
            if pos + 8 > stop:
                what = _field_what(name, field, number)
                raise TruncatedInput(f"{what}: 8-byte value runs past the end", offset=base + pos)
            pos += 8
        elif wire == _I32:
            if pos + 4 > stop:
                what = _field_what(name, field, number)
                raise TruncatedInput(f"{what}: 4-byte value runs past the end", offset=base + pos)
            pos += 4
        else:
            if pos < stop and data[pos] < 0x80:
                length, body = data[pos], pos + 1
            else:
                length, body = _read_varint(data, pos, stop, f"{_field_what(name, field, number)} length", base)
            if body + length > stop:
                raise TruncatedInput(
                    f"{_field_what(name, field, number)}: length {length} runs past the end ({stop - body} bytes left)",
                    offset=base + pos,
                )
            if field is not None and field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type:
                check_message(data, field.message_type, base=base, start=body, end=body + length)
            elif field is not None and expected != _LEN:
                _check_packed(data, body, body + length, expected, _field_what(name, field, number), base, field)
            elif field is not None and field.type == FieldDescriptor.TYPE_STRING:
                try:
                    data[body : body + length].decode("utf-8")
                except UnicodeDecodeError as exc:
                    what = _field_what(name, field, number)
                    raise BadRecord(f"{what}: not UTF-8 ({exc.reason})", offset=base + body + exc.start) from None
            pos = body + length
        seen.add(number)
    for field in descriptor.fields:
        if field.is_required and field.number not in seen:
            raise BadRecord(f"{name}: required field {field.name} is missing", offset=base + start)

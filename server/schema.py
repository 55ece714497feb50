"""The wire schema in one place: pydantic models for the request (validation) and responses (OpenAPI document).

Validation follows decision-protocol.md §3.3: questions are closed (unknown members → 422), `type` is a strict
discriminator over choice/noul/score, content values are str | object | array (| null where the wire allows it) and
are passed to the engine untouched (member order, int vs float), images/assets and the AutoThink/27B variants are
refused. Questions missing, not an object or empty stay a 400, as in the reference server.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, WithJsonSchema, field_validator
from pydantic.json_schema import SkipJsonSchema, models_json_schema
from pydantic_core import PydanticCustomError

from startlux_native.prompt import MAX_CHOICE_OPTIONS, QUESTION_TYPES

from .errors import HttpError

SCORE_LEVELS = (2, 10)
REFUSED_MODEL = re.compile(r"autothink|27b", re.I)

_CONTENT_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "object"}, {"type": "array", "items": {}}]}


def _content(value):
    if isinstance(value, str | dict | list):
        return value
    raise PydanticCustomError("content_type", "must be a string, an object or an array")


def _description(value):
    if value is None or isinstance(value, str | dict | list):
        return value
    raise PydanticCustomError("content_type", "must be a string, an object, an array or null")


# Values kept exactly as parsed (no copy, no coercion): the renderer re-emits them byte for byte.
Content = Annotated[Any, PlainValidator(_content), WithJsonSchema(_CONTENT_SCHEMA)]
Description = Annotated[Any, PlainValidator(_description),
                        WithJsonSchema({"anyOf": [*_CONTENT_SCHEMA["anyOf"], {"type": "null"}]})]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoulCriteria(_Closed):
    true: Description = Field(None, description="What counts as a yes answer.")
    false: Description = Field(None, description="What counts as a no answer.")


class NoulQuestion(_Closed):
    type: Literal["noul"]
    instructions: Description = Field(None, description="The yes/no question; defaults to "
                                                         "'Which answer fits the evidence?'.")
    criteria: NoulCriteria | None = None


class ChoiceQuestion(_Closed):
    type: Literal["choice"]
    instructions: Description = Field(None, description="What to decide (required non-blank by this model).")
    criteria: dict[str, Description] = Field(
        min_length=1, max_length=MAX_CHOICE_OPTIONS,
        description="Option names → descriptions, in order. One option is answered without the model; more than "
                    "26 go through wide-choice rounds.")


class ScoreQuestion(_Closed):
    type: Literal["score"]
    instructions: Description = Field(None, description="What to rate (required non-blank by this model).")
    criteria: list[Content] = Field(min_length=SCORE_LEVELS[0], max_length=SCORE_LEVELS[1],
                                    description="Level descriptions, lowest level (0) first.")


Question = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]


class SystemOneRequest(BaseModel):
    """POST /v1/systemone. Unknown top-level members are ignored (except images/assets, which are refused)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = Field(None, description="Accepted and ignored (AutoThink and 27B variants are refused); "
                                                "the response names the model that answered.")
    state: Content = Field(description="The evidence all questions refer to: text, or any JSON object/array.")
    questions: dict[str, Question] = Field(min_length=1, description="Question id → question; ids key the answers.")
    assets: SkipJsonSchema[Any] = None
    images: SkipJsonSchema[Any] = None

    @field_validator("model")
    @classmethod
    def _served_variant(cls, value):
        if value is not None and REFUSED_MODEL.search(value):
            raise PydanticCustomError(
                "unsupported", "model '{name}' is refused by design: this server serves the Instant 4B model only "
                "(AutoThink and 27B variants are not served)", {"name": value})
        return value

    @field_validator("assets", "images")
    @classmethod
    def _no_images(cls, value):
        if value is not None:
            raise PydanticCustomError("unsupported", "this model takes no images")
        return value


class NoulAnswer(BaseModel):
    type: Literal["noul"]
    noul: float = Field(description="Probability of yes.")


class ChoiceAnswer(BaseModel):
    type: Literal["choice"]
    choice: str
    confidence: float = Field(description="(n·p_max − 1)/(n − 1), clamped to [0, 1].")
    probabilities: dict[str, float]


class ScoreAnswer(BaseModel):
    type: Literal["score"]
    score: float = Field(description="Expected level Σ i·p_i.")
    confidence: float
    legend: dict[str, str | dict[str, Any] | list[Any]]
    probabilities: dict[str, float]


Answer = Annotated[NoulAnswer | ChoiceAnswer | ScoreAnswer, Field(discriminator="type")]


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int


class SystemOneResponse(BaseModel):
    model: str
    answers: dict[str, Answer]
    usage: Usage
    latency_ms: float | None = Field(None, description="Queue + inference time in ms (extension).")


class ModelMetadata(BaseModel):
    name: str
    description: str
    release_date: str


class ModelList(BaseModel):
    models: list[ModelMetadata]


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    error: str = Field(description="A complete human sentence.")
    detail: list[ErrorItem]


# ---------------------------------------------------------------------------------------------------------------
# validation → HttpError


def _path(loc: tuple) -> tuple[str | int, ...]:
    """Pydantic puts the union tag after the question id (questions, id, tag, field…); the wire path has none."""
    if len(loc) > 2 and loc[0] == "questions" and loc[2] in QUESTION_TYPES:
        return (*loc[:2], *loc[3:])
    return tuple(loc)


def _sentence(err: dict, path: tuple, question) -> tuple[str, str, str]:
    """(error sentence, msg, type) for one pydantic error; `question` is the raw question it points into."""
    kind, msg, ctx = err["type"], err["msg"], err.get("ctx") or {}
    question = question if isinstance(question, dict) else {}
    if path and path[0] == "questions" and len(path) >= 2:
        qid, rest = path[1], path[2:]
        where = f"question '{qid}'"
        if kind == "union_tag_invalid":
            tag = ctx.get("tag")
            why = {"box": "box questions need an image model; ", "bool": "use 'noul'; "}.get(tag, "")
            msg = f"unknown question type '{tag}' ({why}this model answers choice, noul and score)"
            return f"{where}: {msg}", msg, "value_error"
        if kind == "union_tag_not_found":
            msg = "unknown question type: 'type' is missing (expected choice, noul or score)"
            return f"{where}: {msg}", msg, "missing"
        if kind == "model_attributes_type" and not rest:
            msg = "a question must be a JSON object"
            return f"{where}: {msg}", msg, "type_error"
        if rest == ("criteria",) and kind in ("too_short", "too_long"):
            n = len(question.get("criteria") or ())
            if question.get("type") == "choice":
                msg = f"choice needs 1..{MAX_CHOICE_OPTIONS} options, got {n}"
            else:
                msg = f"score needs {SCORE_LEVELS[0]}..{SCORE_LEVELS[1]} levels, got {n}"
            return f"{where}: {msg}", msg, "value_error"
        if kind == "extra_forbidden":
            msg = f"unknown member '{rest[-1]}'"
            if len(rest) > 1:
                msg = f"{'.'.join(map(str, rest[:-1]))}: {msg}"
            return f"{where}: {msg}", msg, "extra_forbidden"
        field = ".".join(map(str, rest)) or "question"
        msg = "field required" if kind == "missing" else msg
        return f"{where}: {field}: {msg}", msg, kind
    field = ".".join(map(str, path)) or "body"
    if kind == "missing":
        msg = "field required"
    elif kind in ("unsupported",):
        return msg, msg, kind
    elif field == "model" and kind == "string_type":
        msg = "must be a string"
    return f"{field}: {msg}", msg, kind


def validate_request(obj, max_questions: int | None = None) -> SystemOneRequest:
    """Validate a parsed body. Raises HttpError (400 for the body/questions shape, 422 for the rest).
    The question count is checked first, so a body of many questions costs no validation work."""
    if not isinstance(obj, dict):
        raise HttpError(400, "body must be a JSON object", type="type_error")
    questions = obj.get("questions")
    if max_questions is not None and isinstance(questions, dict) and len(questions) > max_questions:
        msg = f"{len(questions)} questions, over the limit of {max_questions}"
        raise HttpError(422, msg, loc=("body", "questions"), type="too_long")
    try:
        return SystemOneRequest.model_validate(obj)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    detail, sentences, status = [], [], 422
    position = {qid: i for i, qid in enumerate(questions)} if isinstance(questions, dict) else {}
    for err in errors:
        path = _path(err["loc"])
        if path == ("questions",):
            status = 400
            sentence, msg, kind = "questions must be a non-empty object", "must be a non-empty object", err["type"]
        else:
            q = questions.get(path[1]) if len(path) >= 2 and path[0] == "questions" else None
            sentence, msg, kind = _sentence(err, path, q)
        detail.append({"loc": ["body", *path], "msg": msg, "type": kind})
        order = position.get(path[1], -1) if len(path) >= 2 and path[0] == "questions" else -1
        sentences.append(((path != ("questions",), order, kind != "extra_forbidden"), sentence))
    # The questions-shape 400 wins; then top-level fields; then the first failing question in request order, where
    # an unknown member (often an alias such as `options`) explains more than the missing field it stands for.
    sentences.sort(key=lambda s: s[0])
    raise HttpError(status, sentences[0][1], detail=detail)


# ---------------------------------------------------------------------------------------------------------------
# OpenAPI document, generated from the models above


def openapi(title: str, version: str) -> dict:
    _, defs = models_json_schema(
        [(SystemOneRequest, "validation"), (SystemOneResponse, "serialization"), (ModelList, "serialization"),
         (ErrorBody, "serialization")], ref_template="#/components/schemas/{model}")
    schemas = defs["$defs"]

    def ref(name):
        return {"$ref": f"#/components/schemas/{name}"}

    def err(desc):
        return {"description": desc, "content": {"application/json": {"schema": ref("ErrorBody")}}}

    post = {
        "summary": "Answer typed questions (choice, noul, score) about one state",
        "operationId": "system_one",
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("SystemOneRequest")}}},
        "responses": {
            "200": {"description": "Answers keyed by question id",
                    "content": {"application/json": {"schema": ref("SystemOneResponse")}}},
            "400": err("Malformed JSON, or questions missing/empty"),
            "413": err("Body (raw or decoded) over the size limit"),
            "415": err("Content type not application/json, or unsupported Content-Encoding"),
            "422": err("Schema violation, unsupported question, or a prompt over the token limit"),
            "429": err("Admission full; retry after Retry-After"),
            "500": err("Internal inference failure"),
            "503": err("Loading, draining, or device failure"),
        },
    }
    plain = {"200": {"description": "OK"}}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": {
            "/v1/systemone": {"post": post},
            "/v1/models": {"get": {"operationId": "list_models", "responses": {
                "200": {"description": "Served models",
                        "content": {"application/json": {"schema": ref("ModelList")}}},
                "503": err("Model is loading")}}},
            "/health": {"get": {"operationId": "health", "responses": plain}},
            "/ready": {"get": {"operationId": "ready", "responses": {**plain, "503": err("Not ready")}}},
            "/info": {"get": {"operationId": "info", "responses": plain}},
            "/metrics": {"get": {"operationId": "metrics", "responses": plain}},
        },
        "components": {"schemas": schemas},
    }

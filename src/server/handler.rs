//! The pgwire query handlers: simple and extended protocol, mapped onto [`Session`].

use super::encode::{encode_rows, shared_fields};
use super::params::{decode_param, pg_type_for_param};
use crate::error::EddyError;
use crate::session::{Outcome, Prepared, Session};
use async_trait::async_trait;
use futures::{Sink, SinkExt, stream};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use std::fmt::Debug;
use std::sync::Arc;

fn to_pgwire(e: EddyError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e)))
}

fn error_info(e: EddyError) -> ErrorInfo {
    ErrorInfo::new("ERROR".into(), e.code.into(), e.message)
}

fn session_of<C: ClientInfo>(client: &C) -> PgWireResult<Arc<Session>> {
    client
        .session_extensions()
        .get::<Session>()
        .ok_or_else(|| to_pgwire(EddyError::internal("connection has no session")))
}

/// Turns an outcome into the wire response, encoding rows in the requested formats.
fn respond(outcome: Outcome, format: &Format) -> PgWireResult<Response> {
    Ok(match outcome {
        Outcome::Rows { schema, batches } => {
            let fields = shared_fields(&schema, format);
            let rows = encode_rows(&batches, &fields).map_err(to_pgwire)?;
            Response::Query(QueryResponse::new(
                fields,
                stream::iter(rows.into_iter().map(Ok)),
            ))
        }
        Outcome::Command(tag) => Response::Execution(Tag::new(&tag)),
        Outcome::TransactionStart(tag) => Response::TransactionStart(Tag::new(&tag)),
        Outcome::TransactionEnd(tag) => Response::TransactionEnd(Tag::new(&tag)),
        Outcome::CopyIn { columns } => {
            Response::CopyIn(CopyResponse::new(0, columns, stream::empty()))
        }
        Outcome::Empty => Response::EmptyQuery,
    })
}

pub struct QueryHandler {
    parser: Arc<EddyQueryParser>,
}

impl QueryHandler {
    pub fn new() -> Self {
        Self {
            parser: Arc::new(EddyQueryParser),
        }
    }
}

impl Default for QueryHandler {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl SimpleQueryHandler for QueryHandler {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        let mut responses = Vec::new();
        for result in session.execute_sql(query).await {
            match result.and_then(|o| {
                respond(o, &Format::UnifiedText).map_err(|e| EddyError::internal(e.to_string()))
            }) {
                Ok(r) => responses.push(r),
                Err(e) => {
                    responses.push(Response::Error(Box::new(error_info(e))));
                    break;
                }
            }
        }
        Ok(responses)
    }
}

/// Parses and plans statements for the extended protocol.
pub struct EddyQueryParser;

#[async_trait]
impl QueryParser for EddyQueryParser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let session = session_of(client)?;
        session.prepare(sql).await.map(Some).map_err(to_pgwire)
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(stmt
            .param_types
            .iter()
            .map(|t| pg_type_for_param(t.as_ref()))
            .collect())
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(match &stmt.result_schema {
            Some(schema) => shared_fields(schema, format.unwrap_or(&Format::UnifiedText))
                .as_ref()
                .clone(),
            None => vec![],
        })
    }
}

#[async_trait]
impl ExtendedQueryHandler for QueryHandler {
    type Statement = Prepared;
    type QueryParser = EddyQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        let prepared = &portal.statement.statement;
        let mut params = Vec::with_capacity(portal.parameters.len());
        for (i, value) in portal.parameters.iter().enumerate() {
            let target = prepared.param_types.get(i).cloned().flatten();
            let declared = portal
                .statement
                .parameter_types
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| pg_type_for_param(target.as_ref()));
            let scalar = decode_param(
                value.as_ref(),
                portal.parameter_format.is_binary(i),
                &declared,
                target.as_ref(),
            )
            .map_err(to_pgwire)?;
            params.push(scalar);
        }
        let outcome = session
            .execute_prepared(prepared, params)
            .await
            .map_err(to_pgwire)?;
        respond(outcome, &portal.result_column_format)
    }
}

#[async_trait]
impl CopyHandler for QueryHandler {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        session_of(client)?.copy_data(&copy_data.data);
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let rows = session_of(client)?.copy_done().map_err(to_pgwire)?;
        let tag = Tag::new("COPY").with_rows(rows as usize);
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Ok(session) = session_of(client) {
            session.copy_fail();
        }
        to_pgwire(EddyError::new(
            crate::error::sqlstate::QUERY_CANCELED,
            format!("COPY from stdin failed: {}", fail.message),
        ))
    }
}

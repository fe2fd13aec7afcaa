//! `CREATE USER`, `ALTER USER`, `DROP USER`: login roles with SCRAM-SHA-256 verifiers.

use super::{Outcome, Session};
use crate::catalog::User;
use crate::error::{EddyError, Result, sqlstate};
use crate::sql::UserStatement;
use pgwire::api::auth::sasl::scram::gen_salted_password;

/// PBKDF2 iterations of stored verifiers; the SCRAM exchange must use the same number.
pub const SCRAM_ITERATIONS: usize = 4096;

/// Builds the stored SCRAM material for a password.
pub fn verifier(name: &str, password: &str, superuser: bool) -> User {
    let salt: [u8; 16] = rand::random();
    User {
        name: name.to_string(),
        scram_salt: salt.to_vec(),
        scram_salted_password: gen_salted_password(password, &salt, SCRAM_ITERATIONS),
        is_superuser: superuser,
    }
}

pub(super) fn execute(session: &Session, stmt: UserStatement) -> Result<Outcome> {
    let catalog = &session.engine.catalog;
    match stmt {
        UserStatement::Create {
            name,
            password,
            superuser,
        } => {
            if catalog.user(&name).is_some() {
                return Err(EddyError::new(
                    sqlstate::DUPLICATE_OBJECT,
                    format!("role \"{name}\" already exists"),
                ));
            }
            // A user without a password cannot log in when passwords are required.
            let user = match password {
                Some(p) => verifier(&name, &p, superuser),
                None => User {
                    name: name.clone(),
                    scram_salt: vec![],
                    scram_salted_password: vec![],
                    is_superuser: superuser,
                },
            };
            catalog.put_user(user)?;
            Ok(Outcome::Command("CREATE ROLE".into()))
        }
        UserStatement::Alter {
            name,
            password,
            superuser,
        } => {
            let mut user = catalog.user(&name).ok_or_else(|| no_such_role(&name))?;
            if let Some(password) = password {
                match password {
                    Some(p) => {
                        let fresh = verifier(&name, &p, user.is_superuser);
                        user.scram_salt = fresh.scram_salt;
                        user.scram_salted_password = fresh.scram_salted_password;
                    }
                    None => {
                        user.scram_salt.clear();
                        user.scram_salted_password.clear();
                    }
                }
            }
            if let Some(s) = superuser {
                user.is_superuser = s;
            }
            catalog.put_user(user)?;
            Ok(Outcome::Command("ALTER ROLE".into()))
        }
        UserStatement::Drop { names, if_exists } => {
            for name in &names {
                if name == session.user() {
                    return Err(EddyError::new("55006", "current user cannot be dropped"));
                }
                if catalog.user(name).is_none() && !if_exists {
                    return Err(no_such_role(name));
                }
            }
            for name in &names {
                catalog.drop_user(name)?;
            }
            Ok(Outcome::Command("DROP ROLE".into()))
        }
    }
}

fn no_such_role(name: &str) -> EddyError {
    EddyError::new(
        sqlstate::UNDEFINED_OBJECT,
        format!("role \"{name}\" does not exist"),
    )
}
